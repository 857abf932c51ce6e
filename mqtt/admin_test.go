package mqtt_test

import (
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/junctionmq/junction/mqtt/mqtttest"
)

func TestConnectionListedAndClosable(t *testing.T) {
	tb := mqtttest.Start(t)
	c := tb.Client(t, "admin-me")
	mqtttest.Wait(t, c.Publish("a/b", 1, false, "hello"))
	// The bridge's own session is not a connection.
	conns := tb.Core.Connections()
	if len(conns) != 1 || conns[0].Protocol != "mqtt" || conns[0].RemoteAddr == "" || conns[0].MessagesIn != 1 {
		t.Fatalf("connections %+v", conns)
	}
	if err := tb.Core.CloseConnection(conns[0].ID); err != nil {
		t.Fatal(err)
	}
	waitGone(t, tb, c)
}

// TestConnectionAbortable: AbortConnection (the cluster's fence) ends
// the connection as CloseConnection does (internal/outbound tests the
// reset itself).
func TestConnectionAbortable(t *testing.T) {
	tb := mqtttest.Start(t)
	c := tb.Client(t, "abort-me")
	mqtttest.Wait(t, c.Publish("a/b", 1, false, "hello"))
	conns := tb.Core.Connections()
	if len(conns) != 1 {
		t.Fatalf("connections %+v", conns)
	}
	if err := tb.Core.AbortConnection(conns[0].ID); err != nil {
		t.Fatal(err)
	}
	waitGone(t, tb, c)
}

// waitGone waits up to 5 s for c to see its connection end and for the
// broker to list no connection.
func waitGone(t *testing.T, tb *mqtttest.Broker, c paho.Client) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for c.IsConnectionOpen() || len(tb.Core.Connections()) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("client open %v, connections %+v", c.IsConnectionOpen(), tb.Core.Connections())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
