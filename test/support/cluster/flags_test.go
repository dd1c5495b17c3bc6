package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestHarnessFlagsKnown: every flag the harness passes to kube-apiserver and
// kube-controller-manager of each tested Kubernetes version (apiserverFlags and
// controllerManagerFlags as forVersion filters them) is one that version's binary lists in its
// --help, and every controller of Controllers is one it has: a binary exits on an unknown flag,
// so a flag added for the newest version must say since which minor it exists.
func TestHarnessFlagsKnown(t *testing.T) {
	c := &Cluster{Dir: "/x", EtcdURL: "http://127.0.0.1:1", KubeconfigPath: "/x/k", pki: &pki{}}
	for _, v := range KubeVersions {
		t.Run(v, func(t *testing.T) {
			bin := BinDirFor(t, v)
			c.KubeVersion = v
			apiserver, err := c.apiserverArgs(1)
			if err != nil {
				t.Fatal(err)
			}
			checkFlags(t, filepath.Join(bin, "kube-apiserver"), apiserver)
			kcm, err := c.controllerManagerArgs()
			if err != nil {
				t.Fatal(err)
			}
			help := checkFlags(t, filepath.Join(bin, "kube-controller-manager"), kcm)
			for _, name := range Controllers {
				if !strings.Contains(help, " "+name+",") && !strings.Contains(help, " "+name+"\n") {
					t.Errorf("kube-controller-manager %s has no controller %q", v, name)
				}
			}
		})
	}
}

// checkFlags runs bin --help and reports the flags of args it does not list; it returns the help.
func checkFlags(t *testing.T, bin string, args []string) string {
	t.Helper()
	out, err := exec.Command(bin, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --help: %v\n%s", bin, err, out)
	}
	help := string(out)
	for _, a := range args {
		name, _, _ := strings.Cut(a, "=")
		if !regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(name) + `\b`).MatchString(help) {
			t.Errorf("%s does not know %s (passed as %s)", filepath.Base(bin), name, a)
		}
	}
	return help
}

// TestKubeVersionPins: the versions `make binaries` builds (the Makefile's OLD_KUBE_VERSION,
// the script's default KUBE_VERSION) are the ones the tests start, so a warm `make test` never
// builds a control plane inside a test's timeout.
func TestKubeVersionPins(t *testing.T) {
	for _, pin := range []struct{ file, re, want string }{
		{"Makefile", `(?m)^OLD_KUBE_VERSION \?= (\S+)$`, OldKubeVersion},
		{filepath.Join("hack", "build-binaries.sh"), `(?m)^DEFAULT_KUBE_VERSION=(\S+)$`, KubeVersion},
	} {
		b, err := os.ReadFile(filepath.Join(RepoRoot(), pin.file))
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(pin.re).FindSubmatch(b)
		if m == nil || string(m[1]) != pin.want {
			t.Errorf("%s: %s matches %q, want %s", pin.file, pin.re, m, pin.want)
		}
	}
}
