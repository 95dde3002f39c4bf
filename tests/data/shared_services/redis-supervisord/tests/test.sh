#!/bin/bash
ok=0
for i in $(seq 30); do supervisorctl status redis | grep -q RUNNING && { ok=1; break; }; sleep 0.3; done
[ $ok = 1 ] || echo "supervisorctl: redis not RUNNING"
[ "$(redis-cli -h 127.0.0.1 get greeting 2>/dev/null)" = hello ] || { echo "greeting not set"; ok=0; }
echo $ok > /logs/verifier/reward.txt
