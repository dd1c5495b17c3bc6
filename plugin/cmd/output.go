package cmd

import (
	"bytes"
	"fmt"
	"io"

	"sigs.k8s.io/yaml"
)

// report is what audit, doctor and cleanup print: text for a person, JSON (and YAML, the
// same document) for a program.
type report interface {
	WriteJSON(io.Writer) error
	WriteText(io.Writer)
}

// outputUsage is the help of every -o flag.
const outputUsage = "output: text, json or yaml"

// outputProblems checks an -o value.
func outputProblems(format string) []string {
	switch format {
	case "text", "json", "yaml":
		return nil
	}
	return []string{fmt.Sprintf("-o %q: use text, json or yaml", format)}
}

// writeReport writes r in format (validated by outputProblems). YAML is the JSON document
// converted, so both carry the same fields under the same names.
func writeReport(w io.Writer, format string, r report) error {
	switch format {
	case "json":
		return r.WriteJSON(w)
	case "yaml":
		var b bytes.Buffer
		if err := r.WriteJSON(&b); err != nil {
			return err
		}
		y, err := yaml.JSONToYAML(b.Bytes())
		if err != nil {
			return fmt.Errorf("converting the report to YAML: %w", err)
		}
		_, err = w.Write(y)
		return err
	default:
		r.WriteText(w)
		return nil
	}
}
