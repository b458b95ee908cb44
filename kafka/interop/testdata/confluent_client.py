# A confluent-kafka (librdkafka) consumer driven by the interop tests.
# Reads commands on stdin (commit [base], fetch, close), writes JSON lines on
# stdout. "commit B" commits offset B+p for each owned partition p (B: 100).
import json
import os
import queue
import sys
import threading
import time

from confluent_kafka import Consumer, KafkaError, TopicPartition, libversion, version

env = os.environ
topic = env["TOPIC"]
parts = int(env["PARTITIONS"])
cooperative = env.get("ASSIGNOR") == "cooperative-sticky"
# Revocations take REVOKE_MS (a consumer finishing its work).
revoke_s = int(env.get("REVOKE_MS", "0")) / 1000.0
conf = {
    "bootstrap.servers": env["BOOTSTRAP"],
    "group.id": env["GROUP"],
    "client.id": env["CLIENT_ID"],
    "session.timeout.ms": int(env["SESSION_MS"]),
    "heartbeat.interval.ms": 500,
    # librdkafka requires max.poll.interval.ms >= session.timeout.ms.
    "max.poll.interval.ms": max(10000, int(env["SESSION_MS"])),
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
    "partition.assignment.strategy": env.get("ASSIGNOR", "range"),
}


def on_error(err):
    if err.code() == KafkaError.INCONSISTENT_GROUP_PROTOCOL:
        emit(rejected=str(err))
    else:
        emit(log="error: %s" % err)


conf["error_cb"] = on_error
# Security as the tests set it: SECURITY_PROTOCOL, SASL_MECHANISM,
# SASL_USERNAME, SASL_PASSWORD, SSL_CA_FILE.
if env.get("SECURITY_PROTOCOL", "PLAINTEXT") != "PLAINTEXT":
    conf["security.protocol"] = env["SECURITY_PROTOCOL"].lower()
if env.get("SASL_MECHANISM"):
    conf.update({"sasl.mechanisms": env["SASL_MECHANISM"],
                 "sasl.username": env["SASL_USERNAME"],
                 "sasl.password": env["SASL_PASSWORD"]})
if env.get("SSL_CA_FILE"):
    conf["ssl.ca.location"] = env["SSL_CA_FILE"]
if env.get("INSTANCE_ID"):
    conf["group.instance.id"] = env["INSTANCE_ID"]
if env.get("RECONNECT_BACKOFF_MAX_MS"):
    conf["reconnect.backoff.max.ms"] = int(env["RECONNECT_BACKOFF_MAX_MS"])

owned = set()


def emit(**kw):
    print(json.dumps(kw), flush=True)


def member():
    try:
        return consumer.memberid()
    except Exception:
        return ""


def report(event):
    emit(owned=sorted(owned), gen=-1, member=member(), event=event)


def event(kind, ps, t):
    # Timestamped ownership changes: an assignment starts when its callback
    # is called, a revocation ends when its callback returns.
    emit(ev=kind, parts=sorted(p.partition for p in ps if p.topic == topic), t=t)


def on_assign(c, ps):
    global owned
    event("assigned", ps, time.time_ns())
    if cooperative:
        owned |= {p.partition for p in ps}
    else:
        owned = {p.partition for p in ps}
    report("assign")


def on_revoke(c, ps):
    if ps and revoke_s > 0:
        time.sleep(revoke_s)
    owned.difference_update(p.partition for p in ps)
    event("revoked", ps, time.time_ns())
    report("revoke")


def on_lost(c, ps):
    owned.difference_update(p.partition for p in ps)
    event("lost", ps, time.time_ns())
    report("lost")


consumer = Consumer(conf)
emit(hello="confluent-kafka %s librdkafka %s" % (version()[0], libversion()[0]))
consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)

cmds = queue.Queue()


def read_stdin():
    for line in sys.stdin:
        cmds.put(line.strip())


threading.Thread(target=read_stdin, daemon=True).start()

while True:
    msg = consumer.poll(0.1)
    if msg is not None and msg.error() and msg.error().code() == KafkaError.INCONSISTENT_GROUP_PROTOCOL:
        emit(rejected=str(msg.error()))
    elif msg is not None and msg.error():
        emit(log="poll: %s" % msg.error())
    try:
        cmd = cmds.get_nowait()
    except queue.Empty:
        continue
    if cmd.startswith("commit"):
        base = int(cmd.split()[1]) if len(cmd.split()) > 1 else 100
        mine = sorted(owned)
        offs = [TopicPartition(topic, p, base + p) for p in mine]
        try:
            res = consumer.commit(offsets=offs, asynchronous=False) if offs else []
        except Exception as e:
            emit(error=str(e), command="commit")
            continue
        bad = [tp for tp in res or [] if tp.error]
        if bad:
            emit(error=str(bad[0].error), command="commit")
            continue
        emit(committed_own={str(p): base + p for p in mine})
    elif cmd == "fetch":
        tps = consumer.committed([TopicPartition(topic, p) for p in range(parts)], timeout=10)
        emit(committed={str(tp.partition): tp.offset for tp in tps})
    elif cmd == "close":
        consumer.close()
        emit(closed=True)
        sys.exit(0)
