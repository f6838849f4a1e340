// The official Java client (kafka-clients, from the embedded broker's jars) on both sides of
// Chronos, for the integration tier (tests/support/java_client.py compiles and runs it).
//
//   produce BOOTSTRAP TOPIC      records on stdin, one a line; prints "partition<TAB>offset"
//                                for each, as the producer's default partitioner chose
//   consume BOOTSTRAP TOPIC N S  every partition from the beginning until N records (and a
//                                second more) or S seconds; prints
//                                "partition<TAB>offset<TAB>timestamp<TAB>record" for each
//
// A record is tab-separated fields: key, value, then a name and a value per header, each
// base64 (a header name's UTF-8 bytes) or "-" for null, so every byte survives the trip.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.Future;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class JavaClient {
    private JavaClient() {}

    public static void main(String[] args) throws Exception {
        if (args.length >= 3 && args[0].equals("produce")) {
            produce(args[1], args[2]);
        } else if (args.length >= 5 && args[0].equals("consume")) {
            consume(args[1], args[2], Integer.parseInt(args[3]), Integer.parseInt(args[4]));
        } else {
            System.err.println("usage: produce BOOTSTRAP TOPIC | consume BOOTSTRAP TOPIC N S");
            System.exit(2);
        }
    }

    private static byte[] decode(String field) {
        return field.equals("-") ? null : Base64.getDecoder().decode(field);
    }

    private static String encode(byte[] bytes) {
        return bytes == null ? "-" : Base64.getEncoder().encodeToString(bytes);
    }

    private static void produce(String bootstrap, String topic) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("key.serializer", ByteArraySerializer.class.getName());
        props.put("value.serializer", ByteArraySerializer.class.getName());
        // Nothing else: the default partitioner and the default delivery guarantees.
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        BufferedReader in =
                new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            String line;
            while ((line = in.readLine()) != null) {
                if (line.isEmpty()) {
                    continue;
                }
                String[] fields = line.split("\t", -1);
                List<Header> headers = new ArrayList<>();
                for (int i = 2; i + 1 < fields.length; i += 2) {
                    String name = new String(decode(fields[i]), StandardCharsets.UTF_8);
                    headers.add(new RecordHeader(name, decode(fields[i + 1])));
                }
                sent.add(producer.send(new ProducerRecord<>(
                        topic, null, decode(fields[0]), decode(fields[1]), headers)));
            }
            producer.flush();
            for (Future<RecordMetadata> future : sent) {
                RecordMetadata meta = future.get();
                System.out.println(meta.partition() + "\t" + meta.offset());
            }
        }
    }

    private static void consume(String bootstrap, String topic, int count, int seconds) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        props.put("enable.auto.commit", "false");
        int seen = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            List<TopicPartition> partitions = new ArrayList<>();
            for (PartitionInfo info : consumer.partitionsFor(topic, Duration.ofSeconds(seconds))) {
                partitions.add(new TopicPartition(topic, info.partition()));
            }
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            long limit = System.nanoTime() + seconds * 1_000_000_000L;
            long settled = Long.MAX_VALUE; // a second past the count: a duplicate would show
            while (System.nanoTime() < Math.min(limit, settled)) {
                if (seen >= count && settled == Long.MAX_VALUE) {
                    settled = System.nanoTime() + 1_000_000_000L;
                }
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    StringBuilder line = new StringBuilder();
                    line.append(r.partition()).append('\t').append(r.offset()).append('\t');
                    line.append(r.timestamp()).append('\t');
                    line.append(encode(r.key())).append('\t').append(encode(r.value()));
                    for (Header h : r.headers()) {
                        line.append('\t').append(encode(h.key().getBytes(StandardCharsets.UTF_8)));
                        line.append('\t').append(encode(h.value()));
                    }
                    System.out.println(line);
                    seen++;
                }
            }
        }
    }
}
