package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	paho5 "github.com/eclipse/paho.golang/paho"
	gostomp "github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"

	"github.com/junctionmq/junction/core"
)

// Scheduling through real clients: each scheduling property from STOMP,
// AMQP and MQTT 5 holds its message until its time; repeating messages
// arrive as often as asked; scheduled messages and jobs are listed,
// counted and cancelled through the API and `junction queue scheduled`,
// and survive a restart.

// timedStomp collects (body, arrival) from sub until quiet.
func timedStomp(t *testing.T, sub *gostomp.Subscription, quiet, max time.Duration) map[string][]time.Time {
	t.Helper()
	out := map[string][]time.Time{}
	deadline := time.After(max)
	for {
		select {
		case m := <-sub.C:
			if m.Err != nil {
				t.Fatalf("receive: %v", m.Err)
			}
			out[string(m.Body)] = append(out[string(m.Body)], time.Now())
		case <-time.After(quiet):
			return out
		case <-deadline:
			return out
		}
	}
}

func TestSchedulingFromEveryProtocol(t *testing.T) {
	stompAddr, _ := startServe(t, artemisConfig(t))
	in := lastInstance
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := gostomp.Dial("tcp", stompAddr, gostomp.ConnOpt.HeartBeat(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Disconnect()
	sub, err := c.Subscribe("/queue/sched.all", gostomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	// In place before MQTT publishes: the receipts of the sends below
	// come after it.
	tsub, err := c.Subscribe("/topic/sched.mqtt", gostomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	due := map[string]time.Time{}
	ms := func(d time.Duration) string { return fmt.Sprint(start.Add(d).UnixMilli()) }

	// STOMP headers.
	for body, h := range map[string][2]string{
		"stomp-time":     {core.PropScheduledTime, ms(700 * time.Millisecond)},
		"stomp-delivery": {core.PropSchedDelivery, ms(800 * time.Millisecond)},
		"stomp-delay":    {core.PropScheduledDelay, "900"},
	} {
		if err := c.Send("/queue/sched.all", "text/plain", []byte(body), gostomp.SendOpt.Receipt, gostomp.SendOpt.Header(h[0], h[1])); err != nil {
			t.Fatal(err)
		}
	}
	due["stomp-time"], due["stomp-delivery"], due["stomp-delay"] = start.Add(700*time.Millisecond), start.Add(800*time.Millisecond), start.Add(900*time.Millisecond)
	// Repeating: 3 copies 300 ms apart, the first after 200 ms.
	if err := c.Send("/queue/sched.all", "text/plain", []byte("stomp-repeat"), gostomp.SendOpt.Receipt, gostomp.SendOpt.Header("persistent", "true"),
		gostomp.SendOpt.Header(core.PropScheduledDelay, "200"), gostomp.SendOpt.Header(core.PropScheduledPeriod, "300"), gostomp.SendOpt.Header(core.PropScheduledRepeat, "2")); err != nil {
		t.Fatal(err)
	}

	// AMQP application properties (numbers).
	ac, err := goamqp.Dial(ctx, "amqp://"+in.addrs["amqp"].String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	as, err := ac.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	snd, err := as.NewSender(ctx, "queue://sched.all", nil)
	if err != nil {
		t.Fatal(err)
	}
	for body, props := range map[string]map[string]any{
		"amqp-time":   {core.PropScheduledTime: start.Add(600 * time.Millisecond).UnixMilli()},
		"amqp-delay":  {core.PropScheduledDelay: int32(500)},
		"amqp-repeat": {core.PropScheduledRepeat: int64(1), core.PropScheduledPeriod: int64(400)},
	} {
		if err := snd.Send(ctx, &goamqp.Message{Data: [][]byte{[]byte(body)}, ApplicationProperties: props}, nil); err != nil {
			t.Fatal(err)
		}
	}
	due["amqp-time"], due["amqp-delay"] = start.Add(600*time.Millisecond), start.Add(500*time.Millisecond)

	// MQTT 5 user properties.
	mc := paho5.NewClient(paho5.ClientConfig{ClientID: "sched-pub", Conn: dialTCP(t, in.addrs["mqtt"].String())})
	if _, err := mc.Connect(ctx, &paho5.Connect{ClientID: "sched-pub", KeepAlive: 30, CleanStart: true}); err != nil {
		t.Fatal(err)
	}
	defer mc.Disconnect(&paho5.Disconnect{})
	p := &paho5.Publish{Topic: "sched/mqtt", QoS: 1, Payload: []byte("mqtt-delay"), Properties: &paho5.PublishProperties{}}
	p.Properties.User.Add(core.PropScheduledDelay, "600")
	if _, err := mc.Publish(ctx, p); err != nil {
		t.Fatal(err)
	}
	due["mqtt-delay"] = start.Add(600 * time.Millisecond)

	// Counted while they wait.
	var q map[string]any
	q = apiQueue(t, in.addrs["console"].String(), "sched.all")
	if q["scheduled"].(float64) < 5 {
		t.Errorf("queue scheduled = %v while 5 one-shot messages wait", q["scheduled"])
	}
	_, metrics := httpGet(t, "http://"+in.addrs["console"].String()+"/metrics")
	if !strings.Contains(metrics, "junction_scheduled_jobs 2") {
		t.Errorf("metrics: want junction_scheduled_jobs 2")
	}

	// (go-stomp has one reader per connection: both subscriptions are
	// read at once.)
	topicGot := make(chan map[string][]time.Time, 1)
	go func() { topicGot <- timedStomp(t, tsub, 1500*time.Millisecond, 10*time.Second) }()
	got := timedStomp(t, sub, 1500*time.Millisecond, 10*time.Second)
	for k, v := range <-topicGot {
		got[k] = v
	}
	for body, at := range due {
		if len(got[body]) != 1 {
			t.Errorf("%s: delivered %d times (all: %v)", body, len(got[body]), got)
			continue
		}
		if early := at.Sub(got[body][0]); early > 5*time.Millisecond {
			t.Errorf("%s: delivered %v early", body, early)
		}
	}
	if n := len(got["stomp-repeat"]); n != 3 {
		t.Errorf("stomp-repeat (repeat 2): %d copies, want 3", n)
	} else {
		// Copy k is due 200 ms + k periods of 300 ms after the send.
		for k, at := range got["stomp-repeat"] {
			if due := start.Add(200*time.Millisecond + time.Duration(k)*300*time.Millisecond); due.Sub(at) > 5*time.Millisecond {
				t.Errorf("stomp-repeat: copy %d delivered %v early", k, due.Sub(at))
			}
		}
	}
	if n := len(got["amqp-repeat"]); n != 2 {
		t.Errorf("amqp-repeat (repeat 1): %d copies, want 2", n)
	}
}

func TestScheduledListedCancelledAndDurable(t *testing.T) {
	cfg := artemisConfig(t)
	stompAddr, stop := startServe(t, cfg)
	console := lastInstance.addrs["console"].String()
	c, err := gostomp.Dial("tcp", stompAddr, gostomp.ConnOpt.HeartBeat(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	send := func(body string, hdr ...string) {
		t.Helper()
		opts := []func(*frame.Frame) error{gostomp.SendOpt.Receipt, gostomp.SendOpt.Header("persistent", "true")}
		for i := 0; i+1 < len(hdr); i += 2 {
			opts = append(opts, gostomp.SendOpt.Header(hdr[i], hdr[i+1]))
		}
		if err := c.Send("/queue/sched.d", "text/plain", []byte(body), opts...); err != nil {
			t.Fatal(err)
		}
	}
	send("in an hour", core.PropScheduledDelay, "3600000")
	send("soon", core.PropScheduledDelay, "2500")
	send("cron", core.PropScheduledCron, "0 0 1 1 *")
	send("repeat", core.PropScheduledDelay, "2000", core.PropScheduledPeriod, "200", core.PropScheduledRepeat, "3")
	c.Disconnect()

	cli := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		if err := run(context.Background(), append([]string{"queue", "scheduled", "sched.d", "--console", console}, args...), noEnv, &out, io.Discard); err != nil {
			t.Fatalf("junction queue scheduled %v: %v\n%s", args, err, out.String())
		}
		return out.String()
	}
	listing := cli()
	t.Logf("junction queue scheduled sched.d:\n%s", listing)
	for _, want := range []string{"2 scheduled message(s)", "in an hour", "soon", "2 repeating message(s)", "0 0 1 1 *"} {
		if !strings.Contains(listing, want) {
			t.Errorf("listing lacks %q", want)
		}
	}
	var res struct {
		Messages []struct {
			ID   uint64 `json:"id"`
			Body string `json:"body"`
		} `json:"messages"`
		Jobs []struct {
			ID   uint64 `json:"id"`
			Cron string `json:"cron"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(cli("--json")), &res); err != nil {
		t.Fatal(err)
	}
	// Cancel the hour-long one and the cron job, by id.
	for _, m := range res.Messages {
		if m.Body == "in an hour" {
			cli("--cancel", fmt.Sprint(m.ID))
		}
	}
	for _, j := range res.Jobs {
		if j.Cron != "" {
			cli("--cancel", fmt.Sprint(j.ID))
		}
	}
	if status, _ := httpAs(t, "DELETE", console, "/api/v1/scheduled/999999", console, ""); status != 404 {
		t.Errorf("cancel of an unknown job: %d, want 404", status)
	}
	_, body := httpGet(t, "http://"+console+"/api/v1/scheduled")
	if !strings.Contains(body, `"total":1`) {
		t.Errorf("GET /scheduled after the cancel: %s", body)
	}

	// Through a restart: the rest arrive on time, once.
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	stompAddr, _ = startServe(t, cfg)
	c, err = gostomp.Dial("tcp", stompAddr, gostomp.ConnOpt.HeartBeat(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Disconnect()
	sub, err := c.Subscribe("/queue/sched.d", gostomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	got := timedStomp(t, sub, 2*time.Second, 15*time.Second)
	if len(got["soon"]) != 1 || len(got["repeat"]) != 4 || len(got["in an hour"])+len(got["cron"]) != 0 {
		t.Errorf("after the restart: soon %d, repeat %d (want 1, 4), cancelled ones %d", len(got["soon"]), len(got["repeat"]), len(got["in an hour"])+len(got["cron"]))
	}
	if q := apiQueue(t, lastInstance.addrs["console"].String(), "sched.d"); q["scheduled"] != float64(0) || q["depth"] != float64(0) {
		t.Errorf("queue after: %v", q)
	}
}
