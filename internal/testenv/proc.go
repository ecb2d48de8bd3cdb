package testenv

import (
	"bytes"
	"fmt"
	"os"
)

// Alive reports whether process pid still runs: any of its threads is
// neither a zombie nor dead. A process whose main thread exited while
// other threads run shows "Z" in /proc/PID/stat and is alive all the same.
func Alive(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return false
	}
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, t.Name()))
		if err != nil {
			continue
		}
		// The command name may hold spaces and parentheses: the state
		// follows the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			continue
		}
		if s := b[i+2]; s != 'Z' && s != 'X' && s != 'x' {
			return true
		}
	}
	return false
}
