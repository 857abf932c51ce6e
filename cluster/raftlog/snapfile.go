package raftlog

import (
	"bytes"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"strings"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/junctionmq/junction/persistence/fs"
)

const (
	snapMagic      = "JNCTSNAP"
	snapVersion    = 1
	snapFileHeader = 64
	snapSuffix     = ".snap"
	tmpSuffix      = ".tmp"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func snapFileName(dir string, group, term, index uint64) string {
	return fmt.Sprintf("%s/%016x-%016x-%016x%s", dir, group, term, index, snapSuffix)
}

func (l *Log) snapPath(group uint64, m *snapMeta) string {
	return snapFileName(l.snapDir, group, m.term, m.index)
}

// writeSnapFile writes data as the snapshot file of (group, m): a temporary
// file, fdatasync, rename, and an fsync of the directory, so that once it
// returns the file is durable under its final name. It fills m.size and
// m.crc.
func (l *Log) writeSnapFile(group uint64, m *snapMeta, data []byte) error {
	m.size = int64(len(data))
	m.crc = crc32.Checksum(data, castagnoli)
	var h [snapFileHeader]byte
	copy(h[:], snapMagic)
	le.PutUint16(h[8:], snapVersion)
	le.PutUint64(h[16:], group)
	le.PutUint64(h[24:], m.index)
	le.PutUint64(h[32:], m.term)
	le.PutUint64(h[40:], uint64(m.size))
	le.PutUint32(h[48:], m.crc)
	le.PutUint32(h[52:], crc32.Checksum(h[:52], castagnoli))

	name := l.snapPath(group, m)
	tmp := name + tmpSuffix
	f, err := l.cfg.FS.Create(tmp)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(h[:], 0)
	if err == nil && len(data) > 0 {
		_, err = f.WriteAt(data, snapFileHeader)
	}
	if err == nil {
		err = f.Datasync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = l.cfg.FS.Rename(tmp, name)
	}
	if err == nil {
		err = l.cfg.FS.SyncDir(l.snapDir)
	}
	if err == nil {
		l.snapWrites.Add(1)
	}
	return err
}

// openSnapFile opens the snapshot file of (group, m) and checks that its
// header matches the record that names it.
func (l *Log) openSnapFile(group uint64, m *snapMeta) (fs.File, error) {
	name := l.snapPath(group, m)
	f, err := l.cfg.FS.Open(name)
	if err != nil {
		return nil, err
	}
	var h [snapFileHeader]byte
	if _, err := f.ReadAt(h[:], 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: header: %w", name, err)
	}
	size, err := f.Size()
	switch {
	case err != nil:
	case !bytes.Equal(h[:8], []byte(snapMagic)) || le.Uint16(h[8:]) != snapVersion:
		err = errors.New("bad magic or version")
	case le.Uint32(h[52:]) != crc32.Checksum(h[:52], castagnoli):
		err = errors.New("header CRC mismatch")
	case le.Uint64(h[16:]) != group || le.Uint64(h[24:]) != m.index || le.Uint64(h[32:]) != m.term ||
		int64(le.Uint64(h[40:])) != m.size || le.Uint32(h[48:]) != m.crc:
		err = errors.New("header does not match the snapshot record")
	case size < snapFileHeader+m.size:
		err = fmt.Errorf("file holds %d bytes of data, record says %d", size-snapFileHeader, m.size)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return f, nil
}

// SnapshotReader reads a snapshot's data from its file, for streaming it
// to a follower without holding it in memory. Read checks the data's CRC
// when it reaches the end and returns ErrSnapshotCorrupt instead of io.EOF
// if it does not match. The file stays readable after a newer snapshot
// replaces it (it is unlinked, not truncated) until Close.
type SnapshotReader struct {
	Metadata *pb.SnapshotMetadata
	Size     int64 // bytes of data

	f    fs.File
	r    *io.SectionReader
	crc  hash.Hash32
	want uint32
}

func (r *SnapshotReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.crc.Write(p[:n])
	if err == io.EOF && r.crc.Sum32() != r.want {
		return n, fmt.Errorf("%w: group snapshot at index %d", ErrSnapshotCorrupt, r.Metadata.GetIndex())
	}
	return n, err
}

// Close closes the file.
func (r *SnapshotReader) Close() error { return r.f.Close() }

func isSnapFile(name string) bool {
	return strings.HasSuffix(name, snapSuffix) || strings.HasSuffix(name, snapSuffix+tmpSuffix)
}
