#!/bin/bash
set -e
cat > /etc/supervisor/conf.d/redis.conf <<'CONF'
[program:redis]
command=/usr/bin/redis-server --bind 127.0.0.1 --port 6379 --daemonize no
autorestart=true
CONF
/usr/bin/supervisord -c /etc/supervisor/supervisord.conf
for i in $(seq 50); do redis-cli -h 127.0.0.1 ping 2>/dev/null | grep -q PONG && break; sleep 0.2; done
redis-cli -h 127.0.0.1 set greeting hello
