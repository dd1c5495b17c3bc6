package cmd

import "github.com/configmap-attacher/configmap-attacher/plugin/cli"

// Exit codes shared by every command (cli's).
const (
	ExitOK    = cli.ExitOK
	ExitFail  = cli.ExitFail
	ExitUsage = cli.ExitUsage
)
