package plugin

// Version is the release version, set at build time with -ldflags "-X ...plugin.Version=v1.2.3".
var Version = "dev"
