# A kafka-python consumer driven by the interop tests.
# Reads commands on stdin (commit [base], fetch, close), writes JSON lines on
# stdout. "commit B" commits offset B+p for each owned partition p (B: 100).
import json
import os
import queue
import sys
import threading
import time

import kafka
from kafka import KafkaConsumer, TopicPartition
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.structs import OffsetAndMetadata

env = os.environ
topic = env["TOPIC"]
parts = int(env["PARTITIONS"])
owned = set()


def emit(**kw):
    print(json.dumps(kw), flush=True)


def generation():
    g = consumer._coordinator._generation
    return g.generation_id, g.member_id


def report(event):
    gen, member = generation()
    emit(owned=sorted(owned), gen=gen, member=member, event=event)


class Listener(ConsumerRebalanceListener):
    def on_partitions_revoked(self, revoked):
        owned.difference_update(tp.partition for tp in revoked)
        report("revoked")

    def on_partitions_assigned(self, assigned):
        owned.clear()
        owned.update(tp.partition for tp in assigned)
        report("assigned")


# Security as the tests set it: SECURITY_PROTOCOL, SASL_MECHANISM (PLAIN),
# SASL_USERNAME, SASL_PASSWORD, SSL_CA_FILE.
security = {}
if env.get("SECURITY_PROTOCOL", "PLAINTEXT") != "PLAINTEXT":
    security["security_protocol"] = env["SECURITY_PROTOCOL"]
if env.get("SASL_MECHANISM"):
    security.update(sasl_mechanism=env["SASL_MECHANISM"],
                    sasl_plain_username=env["SASL_USERNAME"],
                    sasl_plain_password=env["SASL_PASSWORD"])
if env.get("SSL_CA_FILE"):
    security["ssl_cafile"] = env["SSL_CA_FILE"]

consumer = KafkaConsumer(
    **security,
    bootstrap_servers=env["BOOTSTRAP"],
    group_id=env["GROUP"],
    client_id=env["CLIENT_ID"],
    session_timeout_ms=int(env["SESSION_MS"]),
    heartbeat_interval_ms=500,
    max_poll_interval_ms=max(10000, int(env["SESSION_MS"])),
    enable_auto_commit=False,
    auto_offset_reset="earliest",
)
emit(hello="kafka-python %s" % kafka.__version__)
consumer.subscribe([topic], listener=Listener())

cmds = queue.Queue()


def read_stdin():
    for line in sys.stdin:
        cmds.put(line.strip())


threading.Thread(target=read_stdin, daemon=True).start()

while True:
    try:
        consumer.poll(timeout_ms=100)
    except Exception as e:
        # Refusals (GroupAuthorizationFailedError, ...) are reported, and
        # the consumer keeps trying as an application would.
        emit(log="poll: %s: %s" % (type(e).__name__, e))
        time.sleep(0.5)
    try:
        cmd = cmds.get_nowait()
    except queue.Empty:
        continue
    if cmd.startswith("commit"):
        base = int(cmd.split()[1]) if len(cmd.split()) > 1 else 100
        mine = sorted(owned)
        try:
            if mine:
                consumer.commit({TopicPartition(topic, p): OffsetAndMetadata(base + p, None) for p in mine})
        except Exception as e:
            emit(error=str(e), command="commit")
            continue
        emit(committed_own={str(p): base + p for p in mine})
    elif cmd == "fetch":
        out = {}
        for p in range(parts):
            off = consumer.committed(TopicPartition(topic, p))
            out[str(p)] = -1 if off is None else off
        emit(committed=out)
    elif cmd == "close":
        consumer.close()
        emit(closed=True)
        sys.exit(0)
