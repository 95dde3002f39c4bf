#!/bin/bash
# Runs the checks with plain python3 and turns their exit status into the reward.
mkdir -p /logs/verifier
if python3 /tests/test_outputs.py; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
