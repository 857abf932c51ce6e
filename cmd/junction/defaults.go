package main

import (
	"bytes"
	"fmt"
	"io"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/security"
)

//go:generate sh -c "go run . config defaults > ../../testdata/config/full.yaml"

// defaultsHeader opens the output of `junction config defaults`.
const defaultsHeader = `# Every option Junction reads from a configuration file, with its default.
# Generated from the option table by ` + "`junction config defaults`" + ` (go generate
# ./cmd/junction writes it to testdata/config/full.yaml); do not edit.
# Each key is also a flag and an environment variable where a comment
# names one; see junction serve -h.
`

// keyComments describe the keys that have no flag, so no option usage:
// the YAML path, with "[]" for a list's items.
var keyComments = map[string]string{
	"stomp.max-headers":                               "most headers in a STOMP frame",
	"mqtt.receive-maximum":                            "QoS 1/2 messages in flight to one client",
	"persistence.journal-min-files":                   "journal files kept preallocated",
	"persistence.compact-min-files":                   "compact only with at least this many journal files",
	"anonymous-roles":                                 "roles of clients without credentials",
	"security-settings":                               "permissions by address pattern and role; these are the defaults (docs/security.md)",
	"address-settings":                                "policies by address pattern, the most specific match first; these are the defaults every address starts from",
	"address-settings[].match":                        "an address or a wildcard pattern (# for all)",
	"address-settings[].dead-letter-address":          "receives messages rejected, or released max-delivery-attempts times; empty drops them (counted)",
	"address-settings[].expiry-address":               "receives expired messages; empty drops them (counted)",
	"address-settings[].max-delivery-attempts":        "before a message is dead-lettered; 0 = no limit",
	"address-settings[].redelivery-delay":             "before a failed delivery is tried again",
	"address-settings[].redelivery-multiplier":        "the delay grows by this per attempt",
	"address-settings[].max-redelivery-delay":         "0 = 10 x redelivery-delay",
	"address-settings[].auto-create":                  "create addresses and queues on first use",
	"address-settings[].default-routing-type":         "anycast or multicast, for addresses a send auto-creates",
	"address-settings[].max-size-bytes":               "body bytes each queue holds in memory; 0 = unlimited (the broker's max-memory still applies)",
	"address-settings[].address-full-policy":          "PAGE (to disk), BLOCK, FAIL or DROP (counted)",
	"address-settings[].slow-consumer-threshold":      "depth past which a non-durable subscription's consumer is slow; 0 = never",
	"address-settings[].slow-consumer-policy":         "NOTIFY or KILL",
	"address-settings[].id-cache-size":                "duplicate ids remembered per address; 0 turns duplicate detection off",
	"address-settings[].duplicate-id-from-message-id": "an AMQP message-id is the duplicate id of a message without _AMQ_DUPL_ID",
	"address-settings[].last-value-key":               "property keying a last-value queue besides _AMQ_LVQ_NAME; empty: only that",
	"address-settings[].ring-size":                    "messages each queue holds, the oldest waiting one dropped (counted) when full; 0 = no bound",
	"address-settings[].non-destructive":              "consumers leave messages queued: each gets each message once, an ack removes nothing (expiry, replacement, ring and purge do)",
}

// defaultsConfig is the configuration in force when nothing is given,
// with the defaults that live outside Config (core's address settings,
// security's settings, the anonymous role) written out.
func defaultsConfig() Config {
	c := defaultConfig()
	c.AddressSettings = []core.AddressSettings{defaultAddressSettings()}
	c.SecuritySettings = security.DefaultSettings()
	c.AnonymousRoles = []string{security.RoleAnonymous}
	return c
}

// defaultAddressSettings is core.DefaultSettings as the "#" entry of
// address-settings: each field of core.AddressSettings (a pointer) set
// from the field of core.Settings with the same name, so that a setting
// added to core appears here with no change (TestFullYAMLIsGenerated
// fails on one it cannot map).
func defaultAddressSettings() core.AddressSettings {
	a := core.AddressSettings{Match: "#"}
	from := reflect.ValueOf(core.DefaultSettings())
	to := reflect.ValueOf(&a).Elem()
	for i := range to.NumField() {
		f := to.Type().Field(i)
		v := from.FieldByName(f.Name)
		if f.Type.Kind() != reflect.Pointer || !v.IsValid() {
			continue
		}
		want := f.Type.Elem()
		p := reflect.New(want)
		switch {
		case want.Kind() == reflect.String && v.Type().Implements(reflect.TypeFor[fmt.Stringer]()):
			p.Elem().SetString(v.Interface().(fmt.Stringer).String())
		case want.Kind() == reflect.String && v.Kind() != reflect.String:
			continue // a number is no string
		case v.Type().ConvertibleTo(want):
			p.Elem().Set(v.Convert(want))
		default:
			continue
		}
		to.Field(i).Set(p)
	}
	return a
}

// writeDefaults prints every configuration key with its default, each
// commented with its option's usage (and flag) where it has one.
func writeDefaults(w io.Writer) error {
	var doc yaml.Node
	if err := doc.Encode(defaultsConfig()); err != nil {
		return err
	}
	usage := map[string]string{}
	for _, o := range options {
		if _, seen := usage[o.path]; !seen && !strings.HasPrefix(o.usage, "deprecated") {
			usage[o.path] = o.usage + " (--" + o.flag + ")"
		}
	}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := k.Value
				if path != "" {
					p = path + "." + k.Value
				}
				text, ok := usage[p]
				if !ok {
					text, ok = keyComments[p]
				}
				if ok {
					if v.Kind == yaml.ScalarNode {
						v.LineComment = text
					} else {
						k.HeadComment = text
					}
				}
				walk(v, p)
			}
		case yaml.SequenceNode:
			for _, c := range n.Content {
				walk(c, path+"[]")
			}
		}
	}
	root := &doc
	if doc.Kind == yaml.DocumentNode {
		root = doc.Content[0]
	}
	walk(root, "")
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%s%s", defaultsHeader, b.Bytes())
	return err
}
