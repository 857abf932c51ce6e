package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
)

// queueScheduled serves junction queue scheduled NAME [--cancel ID]: the
// messages queue NAME holds back until their delivery time, and the
// repeating messages (AMQ_SCHEDULED_REPEAT, AMQ_SCHEDULED_CRON) the
// broker sends to its address; --cancel removes one of either.
func queueScheduled(ctx context.Context, af *adminFlags, name, cancel string, offset, limit int, stdout io.Writer) error {
	esc := url.PathEscape
	if cancel != "" {
		if _, err := strconv.ParseUint(cancel, 10, 64); err != nil {
			return usagef("queue scheduled: --cancel wants a message id, got %q", cancel)
		}
		if err := af.call(ctx, http.MethodDelete, "/queues/"+esc(name)+"/scheduled/"+cancel, nil, nil); err != nil {
			return err
		}
		if !af.json {
			fmt.Fprintf(stdout, "cancelled %s\n", cancel)
		}
		return nil
	}
	var out map[string]any
	q := url.Values{"offset": {strconv.Itoa(offset)}, "limit": {strconv.Itoa(limit)}}
	if err := af.call(ctx, http.MethodGet, "/queues/"+esc(name)+"/scheduled?"+q.Encode(), nil, &out); err != nil {
		return err
	}
	if af.json {
		return printJSON(stdout, out)
	}
	msgs := items(map[string]any{"messages": out["messages"]})
	fmt.Fprintf(stdout, "%s scheduled message(s) in %s\n", pick(out, "total"), name)
	if len(msgs) > 0 {
		printTable(stdout, markBinary(msgs), []column{
			col("ID", "id"), col("DUE", "due"), col("PRIORITY", "priority"), col("DURABLE", "durable"),
			col("DELIVERIES", "deliveryCount"), col("SIZE", "size"), col("BODY", "body"),
		})
	}
	jobs := items(map[string]any{"jobs": out["jobs"]})
	fmt.Fprintf(stdout, "%d repeating message(s) sent to its address\n", len(jobs))
	if len(jobs) > 0 {
		for _, j := range jobs {
			if m, ok := j["message"].(map[string]any); ok {
				j["body"] = m["body"]
			}
		}
		printTable(stdout, jobs, []column{
			col("ID", "id"), col("NEXT", "next"), col("SENT", "sent"), col("REPEAT", "repeat"),
			col("PERIOD MS", "periodMs"), col("CRON", "cron"), col("BODY", "body"),
		})
	}
	return nil
}
