// Scheduling through Chronos from Node.js with KafkaJS (npm install kafkajs).
// What each header means: docs/recipes.md. The test suite runs this program
// (tests/integration/test_recipes.py).
//
//   node recipe.js [BOOTSTRAP] [INPUT_TOPIC] [PREFIX]
//
// PREFIX starts every id and key, so that runs do not collide (an id already waiting is ignored).
"use strict";

const { Kafka, Partitioners, logLevel } = require("kafkajs");

const [bootstrap = "127.0.0.1:9092", topic = "chronos-input", prefix = ""] =
  process.argv.slice(2);

// chronosDeadline and chronosUntil: ISO-8601 in UTC with milliseconds, which is exactly what
// Date.prototype.toISOString() writes.
const instant = (date) => date.toISOString();
const later = (date, seconds) => new Date(date.getTime() + seconds * 1000);

async function main() {
  const kafka = new Kafka({ brokers: [bootstrap], logLevel: logLevel.WARN });
  // Keys partitioned with murmur2, as the Java client does (and no warning about it).
  const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner });
  await producer.connect();
  // --8<-- [start:send]
  // One record with these headers, awaited: the broker took it (or send throws).
  const send = (key, value, headers) =>
    producer.send({ topic, messages: [{ key, value, headers }] });
  // --8<-- [end:send]
  try {
    const now = new Date();

    // --8<-- [start:in]
    // In 3 seconds: an id of your choosing and the deadline.
    await send(prefix + "order-1", "pay order 1", {
      chronosMessageId: prefix + "reminder-1",
      chronosDeadline: instant(later(now, 3)),
    });
    // --8<-- [end:in]

    // --8<-- [start:at]
    // At an instant: any Date, such as new Date("2030-01-01T09:00:00+01:00"); here 4 s from now.
    const at = later(now, 4);
    await send(prefix + "order-2", "ship order 2", {
      chronosMessageId: prefix + "shipping-2",
      chronosDeadline: instant(at),
    });
    // --8<-- [end:at]

    // --8<-- [start:reschedule]
    // Planned for a minute from now, then moved to 5 s from now with a new value: the same id,
    // the same key (one partition: Chronos reads the two in order).
    await send(prefix + "order-3", "first plan", {
      chronosMessageId: prefix + "follow-up-3",
      chronosDeadline: instant(later(now, 60)),
    });
    await send(prefix + "order-3", "new plan", {
      chronosMessageId: prefix + "follow-up-3",
      chronosAction: "reschedule",
      chronosDeadline: instant(later(now, 5)),
    });
    // --8<-- [end:reschedule]

    // --8<-- [start:cancel]
    // Scheduled, then cancelled: it never fires. A cancel needs no deadline nor value.
    await send(prefix + "order-4", "never sent", {
      chronosMessageId: prefix + "reminder-4",
      chronosDeadline: instant(later(now, 3)),
    });
    await send(prefix + "order-4", null, {
      chronosMessageId: prefix + "reminder-4",
      chronosAction: "cancel",
    });
    // --8<-- [end:cancel]

    // --8<-- [start:every]
    // A series: every 2 seconds from 2 s from now, none after 7 s from now (3 in all).
    await send(prefix + "heartbeat", "tick", {
      chronosMessageId: prefix + "heartbeat",
      chronosEvery: "PT2S",
      chronosDeadline: instant(later(now, 2)),
      chronosUntil: instant(later(now, 7)),
    });
    // --8<-- [end:every]

    // --8<-- [start:cron]
    // Weekdays at 9:00 Paris time, for the tenant "acme", until cancelled.
    await send(prefix + "acme-report", "send the daily report", {
      chronosMessageId: prefix + "daily-report",
      chronosCron: "0 9 * * 1-5",
      chronosTimeZone: "Europe/Paris",
      chronosTenant: "acme",
    });
    // --8<-- [end:cron]
  } finally {
    await producer.disconnect();
  }
}

main().catch((error) => {
  console.error("chronos recipe:", error);
  process.exit(1);
});
