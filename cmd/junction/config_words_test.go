package main

import (
	"fmt"
	"strings"
	"testing"
)

// junction config validate speaks of the file, not of Go: an unknown
// key is "no such option", a map where a list belongs says so, without
// "main.Config" or "[]core.AddressSettings"; and the errors come in the
// order of their lines.
func TestConfigErrorsWithoutGoTypes(t *testing.T) {
	_, errs := parseConfig([]byte("log-level: loud\nbogus-key: 1\nstomp: 5\naddress-settings:\n  orders:\n    max-delivery-attempts: 3\n"))
	report := fmt.Sprint(errs)
	for _, want := range []string{
		"line 2: field bogus-key not found: no such option",
		"line 3: cannot unmarshal !!int `5` into a mapping of options",
		"line 5: cannot unmarshal !!map into a list",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q: %s", want, report)
		}
	}
	if strings.Contains(report, "main.") || strings.Contains(report, "core.") {
		t.Errorf("Go type names in the report: %s", report)
	}
	last := 0
	for _, e := range errs {
		if n := lineNumber(e); n < last {
			t.Errorf("errors out of line order: %s", report)
		} else {
			last = n
		}
	}
}
