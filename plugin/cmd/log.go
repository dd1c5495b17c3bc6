// Package cmd holds the commands of the configmap-attacher binary: the Job (command line),
// audit, the controller, install-plugin and the step plugin's own arguments. Each is
// options → validate (every problem at once) → run; the work itself is done by the core in
// package plugin and its subpackages. main.go only dispatches to them.
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
