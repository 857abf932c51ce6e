package journal

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// reheader gives f a new seq and a new random generation and zeroes its
// first record slot, durably. Older records in the file can no longer
// validate: their CRC is seeded with the old generation's seed, and the new
// seed differs from it (the seed folds the generation to 32 bits, so it is
// the seed that must differ, not only the generation).
func (j *Journal) reheader(f *segFile) error {
	j.rmu.Lock()
	seq := j.nextSeq
	j.nextSeq++
	j.rmu.Unlock()
	gen := rand.Uint64()
	for gen == 0 || seedOf(gen) == f.seed {
		gen = rand.Uint64()
	}
	h := segHeader{seq: seq, gen: gen, created: time.Now().UnixNano()}
	if _, err := f.f.WriteAt(encodeHeader(h), 0); err != nil {
		return err
	}
	if err := f.f.Datasync(); err != nil {
		return err
	}
	j.smu.Lock()
	f.hdr, f.seed, f.woff, f.pos, f.live, f.negs, f.dirty = h, seedOf(gen), segHeaderSize, 0, 0, nil, false
	j.smu.Unlock()
	return nil
}

// createFile creates, preallocates and headers a new journal file.
func (j *Journal) createFile() (*segFile, error) {
	j.rmu.Lock()
	num := j.nextNum
	j.nextNum++
	j.rmu.Unlock()
	name := fileName(j.cfg.Dir, num)
	file, err := j.cfg.FS.Create(name)
	if err != nil {
		return nil, fmt.Errorf("journal: create %s: %w", name, err)
	}
	f := &segFile{num: num, name: name, f: file}
	err = file.Preallocate(j.cfg.FileSize)
	if err == nil {
		err = j.reheader(f)
	}
	if err == nil {
		err = j.cfg.FS.SyncDir(j.cfg.Dir)
	}
	if err != nil {
		file.Close()
		j.cfg.FS.Remove(name)
		return nil, fmt.Errorf("journal: prepare %s: %w", name, err)
	}
	return f, nil
}

func (j *Journal) insertReadyLocked(f *segFile) {
	j.ready = append(j.ready, f)
	sortFiles(j.ready)
}

// takeReady pops the lowest-seq ready file, creating one if none is ready.
func (j *Journal) takeReady() (*segFile, error) {
	j.rmu.Lock()
	if len(j.ready) > 0 {
		f := j.ready[0]
		j.ready = j.ready[1:]
		j.rmu.Unlock()
		j.kickPrep()
		return f, nil
	}
	j.rmu.Unlock()
	j.kickPrep()
	return j.createFile()
}

// prepLoop keeps MinFiles ready files and removes ready files beyond
// PoolFiles (they were re-headered before entering the pool, so removing
// them can never resurrect records).
func (j *Journal) prepLoop() {
	defer j.wg.Done()
	for {
		select {
		case <-j.prepKick:
		case <-j.stop:
			return
		}
		for {
			select {
			case <-j.stop:
				return
			default:
			}
			if j.failedErr() != nil {
				break // a failed journal touches no file
			}
			j.rmu.Lock()
			n := len(j.ready)
			var victim *segFile
			if n > j.cfg.PoolFiles {
				victim = j.ready[n-1]
				j.ready = j.ready[:n-1]
			}
			j.rmu.Unlock()
			if victim != nil {
				victim.f.Close()
				if err := j.cfg.FS.Remove(victim.name); err == nil {
					j.cfg.FS.SyncDir(j.cfg.Dir)
				}
				j.smu.Lock()
				j.stats.Removed++
				j.smu.Unlock()
				continue
			}
			if n >= j.cfg.MinFiles {
				break
			}
			f, err := j.createFile()
			if err != nil {
				// The writer will try again (synchronously) when it needs a
				// file and fail the journal if it cannot get one.
				break
			}
			j.rmu.Lock()
			j.insertReadyLocked(f)
			j.rmu.Unlock()
		}
	}
}
