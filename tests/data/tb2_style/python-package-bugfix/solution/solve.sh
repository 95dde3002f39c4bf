#!/bin/bash
# Reference solution: the total multiplied nothing by the quantity.
set -euo pipefail
sed -i 's/        total += item.unit_price$/        total += item.quantity * item.unit_price/' /app/src/inventory/core.py
grep -q 'item.quantity \* item.unit_price' /app/src/inventory/core.py
