package scenario

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// clockTick is the unit of utime and stime in /proc/PID/stat. It is
// sysconf(_SC_CLK_TCK), which is 100 on every Linux this tool runs on (the
// kernel's USER_HZ); the standard library cannot ask sysconf without cgo.
const clockTick = 10 * time.Millisecond

// procCPU returns the user plus system CPU time the process pid has used,
// from /proc/PID/stat (fields 14 and 15, counted after the parenthesised
// command name, which may itself contain spaces and parentheses).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("broker cpu: %w", err)
	}
	return parseProcStat(b)
}

// parseProcStat extracts utime+stime from the contents of /proc/PID/stat.
func parseProcStat(b []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("broker cpu: malformed /proc stat %q", b)
	}
	// After ")": field 3 (state) is the first; utime is field 14, stime 15.
	f := bytes.Fields(b[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("broker cpu: short /proc stat %q", b)
	}
	ut, err1 := strconv.ParseUint(string(f[11]), 10, 64)
	st, err2 := strconv.ParseUint(string(f[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("broker cpu: bad utime/stime in %q", b)
	}
	return time.Duration(ut+st) * clockTick, nil
}

// machineCPU returns the busy CPU time of the whole machine (all cores) from
// the first line of /proc/stat: user, nice, system, irq, softirq and steal,
// leaving out idle and iowait.
func machineCPU() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := bytes.Fields(line)
	if len(f) < 9 || string(f[0]) != "cpu" {
		return 0, fmt.Errorf("malformed /proc/stat line %q", line)
	}
	var busy uint64
	for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system irq softirq steal
		v, err := strconv.ParseUint(string(f[i]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("malformed /proc/stat line %q", line)
		}
		busy += v
	}
	return time.Duration(busy) * clockTick, nil
}
