ALTER TABLE customers ADD COLUMN lifetime_cents INTEGER NOT NULL DEFAULT 0;
UPDATE customers SET lifetime_cents = (SELECT COALESCE(SUM(total_cents), 0) FROM orders WHERE customer_id = customers.id);
