package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteJSON prints r as one JSON object on a line.
func WriteJSON(w io.Writer, r Result) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// WriteText prints r as a summary: the run's settings, the counts and
// rates, and a table of latency percentiles.
func WriteText(w io.Writer, r Result) error {
	var b strings.Builder
	mode := "non-durable"
	if r.Durable {
		mode = "durable"
	}
	rate := "max"
	if r.Rate > 0 {
		rate = fmt.Sprintf("%.0f msg/s", r.Rate)
	}
	fmt.Fprintf(&b, "%s %s  destination %s\n", r.Protocol, r.URL, r.Destination)
	fmt.Fprintf(&b, "producers %d, consumers %d, size %d B, %s, window %d, rate %s\n\n",
		r.Producers, r.Consumers, r.Size, mode, r.Window, rate)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "\tsent\tconfirmed\treceived\texpected\tsend rate\treceive rate\tMB/s\telapsed\t\n")
	fmt.Fprintf(tw, "\t%d\t%d\t%d\t%d\t%.0f/s\t%.0f/s\t%.2f\t%.2fs\t\n",
		r.Sent, r.Confirmed, r.Received, r.Expected, r.SendRate, r.ReceiveRate, r.MBps, r.ElapsedS)
	tw.Flush()
	b.WriteString("\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "latency\tcount\tp50\tp90\tp99\tp99.9\tmax\t\n")
	row := func(name string, l Latency) {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t\n", name, l.Count,
			FmtUs(l.P50), FmtUs(l.P90), FmtUs(l.P99), FmtUs(l.P999), FmtUs(l.Max))
	}
	row("end-to-end", r.E2E)
	if r.Durable {
		row("confirm", r.Confirm)
	}
	tw.Flush()
	switch r.Stopped {
	case "interrupted":
		b.WriteString("\nstopped by a signal: the figures are those measured so far\n")
	case "deadline", "stalled":
		b.WriteString("\nstopped: sends or deliveries made no progress; the figures are those measured so far\n")
	}
	if r.Received < r.Expected {
		fmt.Fprintf(&b, "\nwarning: %d message(s) not received by the end of the drain\n", r.Expected-r.Received)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// ProgressLine formats p as a one-line status, for a terminal.
func ProgressLine(p Progress) string {
	return fmt.Sprintf("%7s  sent %d (%.0f/s)  received %d (%.0f/s)  backlog %d",
		p.Elapsed.Truncate(time.Second), p.Sent, p.SendRate, p.Received, p.ReceiveRate, p.Backlog)
}
