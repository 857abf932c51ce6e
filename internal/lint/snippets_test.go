package lint

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// snippetRef is a documentation page's marker before a fenced code block
// that shows tested code: <!-- snippet: PATH NAME -->.
var snippetRef = regexp.MustCompile("(?m)^<!-- snippet: (\\S+) (\\S+) -->\n```[a-z]*\n((?s:.*?))```\n")

// TestDocSnippetsAreTheTestedCode checks that every code block a page
// marks as a snippet is, line for line, the region of the tested file
// between the line ending in "snippet: NAME" and the next one ending in
// "end snippet" (trailing blank lines aside): the docs show what the
// tests run.
func TestDocSnippetsAreTheTestedCode(t *testing.T) {
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, page := range pages {
		doc, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range snippetRef.FindAllStringSubmatch(string(doc), -1) {
			found++
			path, name, shown := m[1], m[2], strings.TrimRight(m[3], "\n")
			src, err := os.ReadFile(filepath.Join("../..", path))
			if err != nil {
				t.Errorf("%s: snippet %s: %v", page, name, err)
				continue
			}
			tested, ok := region(string(src), name)
			if !ok {
				t.Errorf("%s: no region \"snippet: %s\" … \"end snippet\" in %s", page, name, path)
				continue
			}
			if tested != shown {
				t.Errorf("%s: snippet %s differs from %s; the page shows\n%s\nthe tests run\n%s", page, name, path, shown, tested)
			}
		}
	}
	if found == 0 {
		t.Fatal("no snippet markers found in docs/*.md: the check checks nothing")
	}
}

func region(src, name string) (string, bool) {
	lines := strings.Split(src, "\n")
	for i, l := range lines {
		if !strings.HasSuffix(strings.TrimSpace(l), "snippet: "+name) {
			continue
		}
		for j := i + 1; j < len(lines); j++ {
			if strings.HasSuffix(strings.TrimSpace(lines[j]), "end snippet") {
				return strings.TrimRight(strings.Join(lines[i+1:j], "\n"), "\n"), true
			}
		}
	}
	return "", false
}
