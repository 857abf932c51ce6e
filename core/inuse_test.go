package core

import (
	"errors"
	"strings"
	"testing"
)

// ErrSubscriptionInUse is returned for a plain queue as for a
// subscription: errors.Is finds it either way, and the text names what
// is in use in words that fit it (a plain queue is no "durable
// subscription").
func TestInUseErrorsSayWhatIsInUse(t *testing.T) {
	b := newBroker(t)
	if err := b.CreateQueue("jobs", Anycast); err != nil {
		t.Fatal(err)
	}
	s := newSession(t, b, "app")
	c, _ := subscribe(t, s, ConsumerOptions{Address: "jobs", RoutingType: Anycast, Credit: 1})
	defer c.Close()
	sub, _ := subscribe(t, s, ConsumerOptions{Address: "news", RoutingType: Multicast, SubscriptionName: "sub", Credit: 1})
	defer sub.Close()

	check := func(what string, err error, want string) {
		t.Helper()
		if !errors.Is(err, ErrSubscriptionInUse) {
			t.Fatalf("%s: %v, want ErrSubscriptionInUse", what, err)
		}
		if msg := err.Error(); !strings.Contains(msg, want) || strings.Count(msg, "core:") != 1 {
			t.Errorf("%s: %q, want it to say %q", what, msg, want)
		}
	}
	check("DeleteQueue", b.DeleteQueue("jobs"), `core: queue "jobs" has consumers`)
	check("DeleteAddress", b.DeleteAddress("jobs"), `core: address "jobs": queue "jobs" has consumers`)
	for _, err := range []error{b.DeleteQueue("jobs"), b.DeleteAddress("jobs")} {
		if strings.Contains(err.Error(), "subscription") {
			t.Errorf("a plain queue's refusal speaks of a subscription: %q", err)
		}
	}
	_, err := s.Subscribe(ConsumerOptions{Address: "news", RoutingType: Multicast, SubscriptionName: "sub", Handler: func(Delivery) {}})
	check("second consumer", err, `subscription "app.sub" has a consumer already`)
	_, err = s.Subscribe(ConsumerOptions{Address: "other", RoutingType: Multicast, SubscriptionName: "sub", Handler: func(Delivery) {}})
	check("replacing", err, `durable subscription "app.sub" has an active consumer`)
	check("Unsubscribe", s.Unsubscribe("sub"), `durable subscription "app.sub" has an active consumer`)
	if _, err := s.Subscribe(ConsumerOptions{Address: "t", RoutingType: Multicast, SharedSubscriptionName: "w", Selector: "k = 1", Handler: func(Delivery) {}}); err != nil {
		t.Fatal(err)
	}
	_, err = s.Subscribe(ConsumerOptions{Address: "t", RoutingType: Multicast, SharedSubscriptionName: "w", Selector: "k = 2", Handler: func(Delivery) {}})
	check("shared selector", err, `has selector "k = 1", not "k = 2"`)
	if ErrSubscriptionInUse.Error() != "core: queue or subscription in use by a consumer" {
		t.Errorf("ErrSubscriptionInUse = %q", ErrSubscriptionInUse)
	}
}
