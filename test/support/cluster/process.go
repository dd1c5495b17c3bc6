package cluster

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is one child process with its log file, restartable (start again after it exited).
// Only the PID it started is ever signalled. Every child this package and its users start
// (control plane, Rollouts controller, controller mode) goes through it, so that they all
// share the Pdeathsig handling below.
type process struct {
	name, bin, logPath, dir string
	args                    []string
	env                     []string // added to os.Environ()

	mu       sync.Mutex
	pid      int
	done     chan struct{} // closed when the process has exited
	err      error         // Wait result, valid after done
	exitCode int           // exit code (-1: killed by a signal), valid after done
}

// start launches the process. The goroutine that forks holds its OS thread until the child
// exits, so the Pdeathsig (SIGKILL when the parent thread dies) fires only when the test
// binary itself dies, never because the Go runtime retired a thread.
func (p *process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done != nil {
		select {
		case <-p.done:
		default:
			return fmt.Errorf("%s already running (pid %d)", p.name, p.pid)
		}
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "=== start %s %s %s\n", time.Now().Format(time.RFC3339Nano), p.bin, strings.Join(p.args, " "))
	done := make(chan struct{})
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer close(done)
		cmd := exec.Command(p.bin, p.args...)
		cmd.Dir = p.dir
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.Env = append(os.Environ(), p.env...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		err := cmd.Start()
		logf.Close()
		if err != nil {
			p.err = err
			started <- err
			return
		}
		p.pid = cmd.Process.Pid
		started <- nil
		p.err = cmd.Wait()
		p.exitCode = cmd.ProcessState.ExitCode()
	}()
	if err := <-started; err != nil {
		<-done
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	p.done = done
	return nil
}

// running reports whether the process is alive.
func (p *process) running() bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// exited returns a channel closed once the process has exited (nil when never started).
func (p *process) exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// result returns the exit code and Wait result of the last run; valid once exited() is closed.
func (p *process) result() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitCode, p.err
}

// PID returns the last started process ID (0 if never started).
func (p *process) PID() int {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid
}

// stop sends SIGTERM to the process this package started and waits; after grace, SIGKILL.
func (p *process) stop(grace time.Duration) {
	if p == nil {
		return
	}
	p.mu.Lock()
	done, pid := p.done, p.pid
	p.mu.Unlock()
	if done == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	select {
	case <-done:
		return
	case <-time.After(grace):
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	<-done
}

// logTail returns the last n lines of the process log.
func (p *process) logTail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(no log %s: %v)", p.logPath, err)
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return fmt.Sprintf("--- last %d lines of %s ---\n%s", len(lines), p.logPath, bytes.Join(lines, []byte("\n")))
}

// logSinceLastStart returns the log written since the last start marker.
func (p *process) logSinceLastStart() string {
	b, _ := os.ReadFile(p.logPath)
	s := string(b)
	if i := strings.LastIndex(s, "\n=== "); i >= 0 {
		return s[i:]
	}
	return s
}

// FreePorts returns n distinct currently free TCP ports on 127.0.0.1.
func FreePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// ChildPIDs lists the live (non-zombie) processes whose parent is pid, from /proc: the plugin
// processes of a Rollouts controller, for example.
func ChildPIDs(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, state, ok := procStat(n)
		if ok && ppid == pid && state != "Z" {
			out = append(out, n)
		}
	}
	return out
}

// procStat reads the parent PID and state of a process from /proc/<pid>/stat.
func procStat(pid int) (ppid int, state string, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, "", false
	}
	// pid (comm) state ppid ...; comm may contain spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, "", false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, "", false
	}
	ppid, err = strconv.Atoi(f[1])
	return ppid, f[0], err == nil
}

// PIDAlive reports whether pid is a live, non-zombie process.
func PIDAlive(pid int) bool {
	_, state, ok := procStat(pid)
	return ok && state != "Z"
}

// waitPIDGone waits up to timeout for pid to exit and reports whether it did.
func waitPIDGone(pid int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for PIDAlive(pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}
