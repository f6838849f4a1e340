// Scheduling through Chronos from Java with the official client (org.apache.kafka:kafka-clients).
// What each header means: docs/recipes.md. The test suite compiles and runs this file
// (tests/integration/test_recipes.py).
//
//   java -cp "$KAFKA_CLIENTS_JARS" ChronosRecipe.java [BOOTSTRAP] [INPUT_TOPIC] [PREFIX]
//
// PREFIX starts every id and key, so that runs do not collide (an id already waiting is ignored).

import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.Properties;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

public final class ChronosRecipe {
    // chronosDeadline and chronosUntil: ISO-8601 in UTC with milliseconds. Not Instant.toString():
    // it writes up to 9 decimals, and Chronos reads at most 6.
    private static final DateTimeFormatter INSTANT =
            DateTimeFormatter.ofPattern("uuuu-MM-dd'T'HH:mm:ss.SSS'Z'").withZone(ZoneOffset.UTC);

    private ChronosRecipe() {}

    public static void main(String[] args) throws Exception {
        String bootstrap = args.length > 0 ? args[0] : "127.0.0.1:9092";
        String topic = args.length > 1 ? args[1] : "chronos-input";
        String prefix = args.length > 2 ? args[2] : "";
        Properties config = new Properties();
        config.put("bootstrap.servers", bootstrap);
        config.put("enable.idempotence", "true"); // a retry neither duplicates nor reorders
        config.put("key.serializer", StringSerializer.class.getName());
        config.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(config)) {
            Instant now = Instant.now();

            // --8<-- [start:in]
            // In 3 seconds: an id of your choosing and the deadline.
            send(producer, topic, prefix + "order-1", "pay order 1",
                    "chronosMessageId", prefix + "reminder-1",
                    "chronosDeadline", INSTANT.format(now.plusSeconds(3)));
            // --8<-- [end:in]

            // --8<-- [start:at]
            // At an instant: any Instant, such as Instant.parse("2030-01-01T08:00:00Z") or
            // ZonedDateTime.of(..., ZoneId.of("Europe/Paris")).toInstant(); here 4 s from now.
            Instant at = now.plusSeconds(4);
            send(producer, topic, prefix + "order-2", "ship order 2",
                    "chronosMessageId", prefix + "shipping-2",
                    "chronosDeadline", INSTANT.format(at));
            // --8<-- [end:at]

            // --8<-- [start:reschedule]
            // Planned for a minute from now, then moved to 5 s from now with a new value: the
            // same id, the same key (one partition: Chronos reads the two in order).
            send(producer, topic, prefix + "order-3", "first plan",
                    "chronosMessageId", prefix + "follow-up-3",
                    "chronosDeadline", INSTANT.format(now.plusSeconds(60)));
            send(producer, topic, prefix + "order-3", "new plan",
                    "chronosMessageId", prefix + "follow-up-3",
                    "chronosAction", "reschedule",
                    "chronosDeadline", INSTANT.format(now.plusSeconds(5)));
            // --8<-- [end:reschedule]

            // --8<-- [start:cancel]
            // Scheduled, then cancelled: it never fires. A cancel needs no deadline nor value.
            send(producer, topic, prefix + "order-4", "never sent",
                    "chronosMessageId", prefix + "reminder-4",
                    "chronosDeadline", INSTANT.format(now.plusSeconds(3)));
            send(producer, topic, prefix + "order-4", null,
                    "chronosMessageId", prefix + "reminder-4",
                    "chronosAction", "cancel");
            // --8<-- [end:cancel]

            // --8<-- [start:every]
            // A series: every 2 seconds from 2 s from now, none after 7 s from now (3 in all).
            send(producer, topic, prefix + "heartbeat", "tick",
                    "chronosMessageId", prefix + "heartbeat",
                    "chronosEvery", "PT2S",
                    "chronosDeadline", INSTANT.format(now.plusSeconds(2)),
                    "chronosUntil", INSTANT.format(now.plusSeconds(7)));
            // --8<-- [end:every]

            // --8<-- [start:cron]
            // Weekdays at 9:00 Paris time, for the tenant "acme", until cancelled.
            send(producer, topic, prefix + "acme-report", "send the daily report",
                    "chronosMessageId", prefix + "daily-report",
                    "chronosCron", "0 9 * * 1-5",
                    "chronosTimeZone", "Europe/Paris",
                    "chronosTenant", "acme");
            // --8<-- [end:cron]
        }
    }

    // --8<-- [start:send]
    /** Produces one record with these headers (name, value, name, value...) and waits for it. */
    private static void send(KafkaProducer<String, String> producer, String topic, String key,
            String value, String... headers) throws Exception {
        ProducerRecord<String, String> record = new ProducerRecord<>(topic, key, value);
        for (int i = 0; i < headers.length; i += 2) {
            record.headers().add(headers[i], headers[i + 1].getBytes(StandardCharsets.UTF_8));
        }
        producer.send(record).get(); // throws if the broker did not take it
    }
    // --8<-- [end:send]
}
