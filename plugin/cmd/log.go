// Package cmd holds the commands of the configmap-attacher binary: the Job (command line),
// audit, the controller, install-plugin and the step plugin's own arguments. Each has the
// skeleton of command.go: options bound to flags → parse and validate (every problem at once,
// one selector flag type, one -workloads grammar) → run, with the same exit codes; the work
// itself is done by the core in package plugin and the mode packages beside it. main.go only
// dispatches to them.
package cmd

import (
	"flag"
	"fmt"

	"github.com/sirupsen/logrus"
)

// Exit codes shared by every command.
const (
	ExitOK    = 0
	ExitFail  = 1
	ExitUsage = 2
)

// ConfigureLogger sets the level and format of a logger.
func ConfigureLogger(log *logrus.Logger, level, format string) error {
	lvl, err := logrus.ParseLevel(level)
	if err != nil {
		return fmt.Errorf("log level %q: use debug, info, warn or error", level)
	}
	log.SetLevel(lvl)
	switch format {
	case "text", "":
		log.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, DisableColors: true})
	case "json":
		log.SetFormatter(&logrus.JSONFormatter{})
	default:
		return fmt.Errorf("log format %q: use text or json", format)
	}
	return nil
}

// kubeconfigFlag registers -kubeconfig, the same for every command that talks to the apiserver.
func kubeconfigFlag(fs *flag.FlagSet, p *string) {
	fs.StringVar(p, "kubeconfig", "", "kubeconfig path (default: in-cluster, then $KUBECONFIG, then ~/.kube/config)")
}

// logFlags registers -log-level and -log-format with the defaults of the long-running modes
// (audit, a report on stdout, has its own quieter -log-level and no -log-format).
func logFlags(fs *flag.FlagSet, level, format *string) {
	fs.StringVar(level, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(format, "log-format", "text", "log format: text or json")
}

// loggerProblems configures log from -log-level and -log-format and returns their problems.
func loggerProblems(log *logrus.Logger, level, format string) []string {
	var problems []string
	if err := ConfigureLogger(log, level, "text"); err != nil {
		problems = append(problems, err.Error())
	}
	if err := ConfigureLogger(log, "info", format); err != nil {
		problems = append(problems, err.Error())
	}
	if len(problems) == 0 {
		_ = ConfigureLogger(log, level, format)
	}
	return problems
}
