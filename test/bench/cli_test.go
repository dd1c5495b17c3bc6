package bench

import (
	"bytes"
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/plugin/cmd"
)

// cliRuns is how many runs each command-line leaf times per invocation.
const cliRuns = 10

// BenchmarkCommandLine: the command-line (Job) mode's wall time for 10 objects (8 ConfigMaps,
// 2 Secrets), process start included: exec of the built binary (without the plugin cookie) on
// a Rollout whose status is already current, as the Job's ServiceAccount with exactly
// examples/job.yaml's Role. fresh clears the references before each run (untimed);
// idempotent finds them in place. inprocess runs cmd.Job.Main in the test process (same
// flags, new clients each run): the difference is the exec and Go runtime start. version is
// `configmap-attacher -version`: process start alone.
func BenchmarkCommandLine(b *testing.B) {
	e := newEnv(b)
	jobCfg := e.jobIdentity(b)
	kubeconfig := e.c.WriteKubeconfig(b, jobCfg)
	set := e.newObjectSet(b, "cli", 8, 2, nil)
	ctx, cancel := bg()
	defer cancel()
	ro, err := e.rollouts.ArgoprojV1alpha1().Rollouts(e.ns).Get(ctx, set.name, metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	// The Rollout's spec carries the ReplicaSet's template, as after a real apply: the command
	// line finds its target with FindNewReplicaSet.
	ro.Spec.Template = set.ro.Spec.Template
	if ro, err = e.rollouts.ArgoprojV1alpha1().Rollouts(e.ns).Update(ctx, ro, metav1.UpdateOptions{}); err != nil {
		b.Fatal(err)
	}
	ro.Status.ObservedGeneration = strconv.FormatInt(ro.Generation, 10)
	ro.Status.CurrentPodHash = set.ro.Status.CurrentPodHash
	if _, err := e.rollouts.ArgoprojV1alpha1().Rollouts(e.ns).UpdateStatus(ctx, ro, metav1.UpdateOptions{}); err != nil {
		b.Fatal(err)
	}
	args := []string{"-rollout", set.name, "-namespace", e.ns, "-configmaps", strings.Join(set.cms, ","),
		"-secrets", strings.Join(set.secrets, ","), "-kubeconfig", kubeconfig}
	want := "attached 8 ConfigMaps and 2 Secrets to ReplicaSet " + set.rs.Name

	binary := func() (string, string, error) {
		cmd := exec.Command(pluginBin, args...)
		cmd.Env = envWithoutCookie()
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}
	inprocess := func() (string, string, error) {
		var stdout, stderr bytes.Buffer
		cli := &cmd.Job{Stdout: &stdout, Stderr: &stderr}
		if code := cli.Main(args); code != 0 {
			return stdout.String(), stderr.String(), &exec.ExitError{}
		}
		return stdout.String(), stderr.String(), nil
	}
	version := func() (string, string, error) {
		cmd := exec.Command(pluginBin, "-version")
		cmd.Env = envWithoutCookie()
		out, err := cmd.Output()
		return string(out), "", err
	}
	if out, errOut, err := binary(); err != nil || !strings.Contains(out, want) {
		b.Fatalf("warm-up: %v\nstdout %s\nstderr %s", err, out, errOut)
	}
	for _, l := range []struct {
		name  string
		fresh bool
		run   func() (string, string, error)
		want  string
	}{
		{"objects=10/fresh/binary", true, binary, want},
		{"objects=10/idempotent/binary", false, binary, want},
		{"objects=10/fresh/inprocess", true, inprocess, want},
		{"version/binary", false, version, "configmap-attacher "},
	} {
		b.Run(l.name, func(b *testing.B) {
			var samples []time.Duration
			var notes []string
			for b.Loop() {
				for i := 0; i < cliRuns; i++ {
					b.StopTimer()
					if l.fresh {
						e.resetOwners(b, set.objects())
					}
					time.Sleep(20 * time.Millisecond)
					b.StartTimer()
					t0 := time.Now()
					out, errOut, err := l.run()
					d := time.Since(t0)
					b.StopTimer()
					if err != nil || !strings.Contains(out, l.want) {
						b.Fatalf("%v\nstdout %s\nstderr %s", err, out, errOut)
					}
					if l.fresh {
						e.verifyOwned(b, set)
					}
					if strings.Contains(errOut, "could not record an event") && len(notes) == 0 {
						notes = append(notes, "event on the Rollout refused (examples/job.yaml grants no create on events): "+firstLine(errOut, "could not record an event"))
					}
					samples = append(samples, d)
					b.StartTimer()
				}
			}
			rec := reportLatency(b, samples)
			rec.Notes = notes
			run.add(b, rec)
		})
	}
	_ = context.Background
}

func firstLine(s, containing string) string {
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, containing) {
			if len(line) > 300 {
				line = line[:300] + "…"
			}
			return line
		}
	}
	return ""
}
