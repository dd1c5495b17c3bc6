package cluster

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is one child process with its log file. Only the PID it started is ever signalled.
type process struct {
	name, bin, logPath, dir string
	args                    []string

	mu   sync.Mutex
	pid  int
	done chan struct{} // closed when the process has exited
	err  error         // Wait result, valid after done
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
	fmt.Fprintf(logf, "=== %s %s %s\n", time.Now().Format(time.RFC3339Nano), p.bin, strings.Join(p.args, " "))
	done := make(chan struct{})
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer close(done)
		cmd := exec.Command(p.bin, p.args...)
		cmd.Dir = p.dir
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.Env = os.Environ()
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
