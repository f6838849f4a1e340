// Scheduling through Chronos from Go with franz-go (github.com/twmb/franz-go/pkg/kgo).
// What each header means: docs/recipes.md. The test suite builds and runs this program
// (tests/integration/test_recipes.py).
//
//	go run . [BOOTSTRAP] [INPUT_TOPIC] [PREFIX]
//
// PREFIX starts every id and key, so that runs do not collide (an id already waiting is ignored).
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// instant writes chronosDeadline and chronosUntil: ISO-8601 in UTC with milliseconds. Not
// time.RFC3339Nano: it writes up to 9 decimals, and Chronos reads at most 6.
func instant(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

func main() {
	bootstrap, topic, prefix := arg(1, "127.0.0.1:9092"), arg(2, "chronos-input"), arg(3, "")
	// Idempotent by default (a retry neither duplicates nor reorders); keys are partitioned
	// with murmur2, as the Java client does.
	client, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.DefaultProduceTopic(topic))
	if err != nil {
		fail(err)
	}
	defer client.Close()
	ctx := context.Background()
	now := time.Now()

	// --8<-- [start:in]
	// In 3 seconds: an id of your choosing and the deadline.
	send(ctx, client, prefix+"order-1", []byte("pay order 1"),
		"chronosMessageId", prefix+"reminder-1",
		"chronosDeadline", instant(now.Add(3*time.Second)))
	// --8<-- [end:in]

	// --8<-- [start:at]
	// At an instant: any time.Time, such as
	// time.Date(2030, time.January, 1, 9, 0, 0, 0, paris) with paris from
	// time.LoadLocation("Europe/Paris"); here 4 s from now.
	at := now.Add(4 * time.Second)
	send(ctx, client, prefix+"order-2", []byte("ship order 2"),
		"chronosMessageId", prefix+"shipping-2",
		"chronosDeadline", instant(at))
	// --8<-- [end:at]

	// --8<-- [start:reschedule]
	// Planned for a minute from now, then moved to 5 s from now with a new value: the same
	// id, the same key (one partition: Chronos reads the two in order).
	send(ctx, client, prefix+"order-3", []byte("first plan"),
		"chronosMessageId", prefix+"follow-up-3",
		"chronosDeadline", instant(now.Add(60*time.Second)))
	send(ctx, client, prefix+"order-3", []byte("new plan"),
		"chronosMessageId", prefix+"follow-up-3",
		"chronosAction", "reschedule",
		"chronosDeadline", instant(now.Add(5*time.Second)))
	// --8<-- [end:reschedule]

	// --8<-- [start:cancel]
	// Scheduled, then cancelled: it never fires. A cancel needs no deadline nor value.
	send(ctx, client, prefix+"order-4", []byte("never sent"),
		"chronosMessageId", prefix+"reminder-4",
		"chronosDeadline", instant(now.Add(3*time.Second)))
	send(ctx, client, prefix+"order-4", nil,
		"chronosMessageId", prefix+"reminder-4",
		"chronosAction", "cancel")
	// --8<-- [end:cancel]

	// --8<-- [start:every]
	// A series: every 2 seconds from 2 s from now, none after 7 s from now (3 in all).
	send(ctx, client, prefix+"heartbeat", []byte("tick"),
		"chronosMessageId", prefix+"heartbeat",
		"chronosEvery", "PT2S",
		"chronosDeadline", instant(now.Add(2*time.Second)),
		"chronosUntil", instant(now.Add(7*time.Second)))
	// --8<-- [end:every]

	// --8<-- [start:cron]
	// Weekdays at 9:00 Paris time, for the tenant "acme", until cancelled.
	send(ctx, client, prefix+"acme-report", []byte("send the daily report"),
		"chronosMessageId", prefix+"daily-report",
		"chronosCron", "0 9 * * 1-5",
		"chronosTimeZone", "Europe/Paris",
		"chronosTenant", "acme")
	// --8<-- [end:cron]
}

// --8<-- [start:send]
// send produces one record with these headers (name, value, name, value...) and waits for it.
func send(ctx context.Context, client *kgo.Client, key string, value []byte, headers ...string) {
	record := &kgo.Record{Key: []byte(key), Value: value}
	for i := 0; i+1 < len(headers); i += 2 {
		record.Headers = append(record.Headers,
			kgo.RecordHeader{Key: headers[i], Value: []byte(headers[i+1])})
	}
	if err := client.ProduceSync(ctx, record).FirstErr(); err != nil {
		fail(err) // the broker did not take it
	}
}

// --8<-- [end:send]

func arg(n int, fallback string) string {
	if len(os.Args) > n {
		return os.Args[n]
	}
	return fallback
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "chronos recipe:", err)
	os.Exit(1)
}
