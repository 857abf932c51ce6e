package main

import (
	"bytes"
	"os"
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestFullYAMLIsGenerated: testdata/config/full.yaml is what `junction
// config defaults` prints, so it shows every option with its default.
func TestFullYAMLIsGenerated(t *testing.T) {
	var out bytes.Buffer
	if err := writeDefaults(&out); err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile("../../testdata/config/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), file) {
		t.Fatalf("testdata/config/full.yaml is out of date: run go generate ./cmd/junction (go run ./cmd/junction config defaults > testdata/config/full.yaml)")
	}
	// Read back, it is the default configuration.
	cfg, errs := parseConfig(file)
	if len(errs) > 0 {
		t.Fatalf("full.yaml: %v", errs)
	}
	// Compared as YAML: an empty list reads back as an empty slice where
	// the default may be nil.
	got, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want, err := yaml.Marshal(defaultsConfig())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("full.yaml read back:\n%s\nwant the defaults:\n%s", got, want)
	}
	// Every address setting has its default in the "#" entry.
	a := reflect.ValueOf(defaultAddressSettings())
	for i := range a.NumField() {
		if f := a.Type().Field(i); f.Type.Kind() == reflect.Pointer && a.Field(i).IsNil() {
			t.Errorf("address setting %s has no default in full.yaml: core.Settings has no field %s it converts from", f.Tag.Get("yaml"), f.Name)
		}
	}
	// Every option has its key, and the keys the docs name are there
	// with their real defaults.
	text := string(file)
	for _, o := range options {
		leaf := o.path[strings.LastIndex(o.path, ".")+1:]
		if !strings.Contains(text, "\n"+strings.Repeat("  ", strings.Count(o.path, "."))+leaf+":") {
			t.Errorf("option --%s: no key %s in full.yaml", o.flag, o.path)
		}
	}
	for _, want := range []string{
		"\nmax-memory: 0", "\n  page-segment-size: 64MiB", "\n  max-disk-usage: 0", "\n  min-free-disk: 256MiB",
		"\nusers: \"\"", "\nallow-anonymous: null", "\nanonymous-roles:", "\nsecurity-settings:",
		"\n    slow-consumer-threshold: 0", "\n    slow-consumer-policy: NOTIFY", "\n    address-full-policy: PAGE",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("full.yaml lacks %q", want)
		}
	}
}
