package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/rawproc"
)

// lifeOps: lifetime and bounds: processes that outlive the run, process/memory/file-size limits, stderr, ...
var lifeOps = map[string]op{
	// A child (this binary, sleeping) that holds the server's stdout and
	// stderr: the pipes to the launcher stay open after the server exits.
	// Returns the child's pid.
	"spawn_stdio": func(r Request) (string, error) {
		self, err := os.Executable()
		if err != nil {
			return "", err
		}
		c := exec.Command(self, "sleep")
		c.Stdout, c.Stderr = os.Stdout, os.Stderr
		if err := c.Start(); err != nil {
			return "", unwrapExec(err)
		}
		return strconv.Itoa(c.Process.Pid), nil
	},
	// The server exits at once (status N), answering nothing.
	"exit": func(r Request) (string, error) {
		os.Exit(r.N)
		return "", nil
	},
	// A child whose main thread exits while its other threads run on:
	// /proc/PID/stat says "Z", yet the process lives.
	"leaderexit": func(r Request) (string, error) {
		return startSelf("leaderexit")
	},
	// A daemon: a child that starts a grandchild in a process group of its
	// own (setpgid; setsid is refused) and exits at once, leaving the
	// grandchild an orphan. The grandchild runs mode Name ("sleep" or
	// "leaderexit"). Returns the grandchild's pid.
	"daemon": func(r Request) (string, error) {
		self, err := os.Executable()
		if err != nil {
			return "", err
		}
		c := exec.Command(self, "daemon", r.Name)
		out, err := c.Output()
		if err != nil {
			return "", unwrapExec(err)
		}
		return strings.TrimSpace(string(out)), nil
	},
	// Up to N forks that only sleep, from the server itself: a fork bomb
	// that stays cheap. Returns how many were made and why the next one
	// failed ("made N" or "made N: ERRNO").
	// A process that forks and exits N times over (a new pid each time):
	// the answer is the first one's pid.
	"forkhop": func(r Request) (string, error) {
		pid, err := rawproc.ForkHop(r.N)
		return strconv.Itoa(pid), err
	},
	// The latest hopper of forkhop: "GENERATION PGID SERVER_PGID" (its
	// process group and the server's, both as seen in the server's pid
	// namespace; "0 0 G": none yet).
	"forkhopstat": func(r Request) (string, error) {
		gen, pgid := rawproc.Hops()
		return fmt.Sprintf("%d %d %d", gen, pgid, syscall.Getpgrp()), nil
	},
	"forkbomb": func(r Request) (string, error) {
		made := 0
		for ; made < r.N; made++ {
			if _, err := rawproc.ForkPause(); err != nil {
				var en syscall.Errno
				if errors.As(err, &en) {
					return fmt.Sprintf("made %d", made), en
				}
				return fmt.Sprintf("made %d", made), err
			}
		}
		return fmt.Sprintf("made %d", made), nil
	},
	// A child that allocates and touches N MiB, then reports; the result is
	// how the child ended ("allocated N" or "signal: killed").
	"hog": func(r Request) (string, error) {
		self, err := os.Executable()
		if err != nil {
			return "", err
		}
		out, err := exec.Command(self, "hog", strconv.Itoa(r.N)).Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				return ee.String(), nil
			}
			return "", unwrapExec(err)
		}
		return strings.TrimSpace(string(out)), nil
	},
	// Write N MiB to Path.
	"writebig": func(r Request) (string, error) {
		f, err := os.OpenFile(r.Path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return "", err
		}
		defer f.Close()
		buf := make([]byte, 1<<20)
		for i := 0; i < r.N; i++ {
			if _, err := f.Write(buf); err != nil {
				var pe *os.PathError
				if errors.As(err, &pe) {
					err = pe.Err
				}
				return strconv.Itoa(i), err
			}
		}
		return strconv.Itoa(r.N), nil
	},
	// Write Data to stderr as it is.
	"stderr": func(r Request) (string, error) {
		_, err := os.Stderr.WriteString(r.Data)
		return "", err
	},
}

// startSelf starts this binary in mode and returns its pid once it says
// it is ready.
func startSelf(mode string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	c := exec.Command(self, mode)
	out, err := c.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := c.Start(); err != nil {
		return "", unwrapExec(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("%s child: %w", mode, err)
	}
	return strings.TrimSpace(line), nil
}

// The child modes of lifeOps: main dispatches to lifeMode first.
func init() {
	if len(os.Args) > 1 && os.Args[1] == "leaderexit" {
		// The main goroutine must stay on the main thread to end it.
		runtime.LockOSThread()
	}
}

// lifeMode runs this binary as one of lifeOps' children; false when
// os.Args names no such mode.
func lifeMode() bool {
	if len(os.Args) < 2 {
		return false
	}
	switch os.Args[1] {
	case "leaderexit":
		go func() {
			for {
				time.Sleep(time.Hour)
			}
		}()
		fmt.Println(os.Getpid())
		rawproc.ExitMainThread()
	case "daemon":
		self, _ := os.Executable()
		c := exec.Command(self, os.Args[2])
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		out, err := c.StdoutPipe()
		if err != nil || c.Start() != nil {
			os.Exit(1)
		}
		if os.Args[2] == "leaderexit" {
			// Wait until its main thread is about to exit.
			_, _ = bufio.NewReader(out).ReadString('\n')
		}
		fmt.Println(c.Process.Pid)
		os.Exit(0)
	case "hog":
		n, _ := strconv.Atoi(os.Args[2])
		var keep [][]byte
		for i := 0; i < n; i++ {
			b := make([]byte, 1<<20)
			for j := 0; j < len(b); j += 4096 {
				b[j] = 1
			}
			keep = append(keep, b)
		}
		fmt.Println("allocated", len(keep))
		os.Exit(0)
	default:
		return false
	}
	return true
}
