#!/bin/bash
# Starts the service in the background on port ${1:-8080} and waits until it answers.
port="${1:-8080}"
python3 /app/service/app.py "$port" >/tmp/service.log 2>&1 &
for _ in $(seq 1 50); do
  curl -s -o /dev/null "http://127.0.0.1:$port/version" && exit 0
  sleep 0.1
done
echo "service did not start" >&2
exit 1
