package rpc

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/sirupsen/logrus"
)

// hclogFormatter writes log lines the way go-plugin's host reads them, so the controller logs
// each plugin line at its real level instead of DEBUG: text lines start with "[INFO]" and the
// like; JSON lines carry hclog's @level, @message and @timestamp keys.
type hclogFormatter struct {
	json bool
	text logrus.TextFormatter
}

func hclogLevel(l logrus.Level) string {
	switch l {
	case logrus.TraceLevel:
		return "trace"
	case logrus.DebugLevel:
		return "debug"
	case logrus.InfoLevel:
		return "info"
	case logrus.WarnLevel:
		return "warn"
	default:
		return "error"
	}
}

func (f *hclogFormatter) Format(e *logrus.Entry) ([]byte, error) {
	if f.json {
		m := make(map[string]any, len(e.Data)+3)
		for k, v := range e.Data {
			if err, ok := v.(error); ok {
				v = err.Error()
			}
			m[k] = v
		}
		m["@level"] = hclogLevel(e.Level)
		m["@message"] = e.Message
		m["@timestamp"] = e.Time.Format("2006-01-02T15:04:05.000000Z07:00")
		b, err := json.Marshal(m)
		if err != nil {
			return nil, err
		}
		return append(b, '\n'), nil
	}
	body, err := f.text.Format(e)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	buf.WriteString("[" + strings.ToUpper(hclogLevel(e.Level)) + "] ")
	buf.Write(body)
	return buf.Bytes(), nil
}

// LogFormatter returns the formatter for the step plugin's --log-format ("text" or "json").
func LogFormatter(format string) logrus.Formatter {
	return &hclogFormatter{json: format == "json", text: logrus.TextFormatter{DisableTimestamp: true, DisableColors: true}}
}
