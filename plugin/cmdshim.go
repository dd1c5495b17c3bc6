package plugin

import (
	"fmt"
	"strings"

	"github.com/sirupsen/logrus"
)

// Transitional: plugin/audit.go still parses its own flags. These go when audit's command
// moves to plugin/cmd (which has the same exit codes, ConfigureLogger and splitList).

// Exit codes of the audit command.
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

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}
