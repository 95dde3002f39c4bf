SELECT p.category,
       COUNT(DISTINCT o.id) AS orders,
       SUM(oi.quantity) AS units,
       SUM(oi.quantity * oi.unit_price_cents) AS revenue_cents
FROM orders o
JOIN order_items oi ON oi.order_id = o.id
JOIN products p ON p.id = oi.product_id
WHERE o.status != 'cancelled'
  AND o.ordered_at >= '2024-01-01' AND o.ordered_at <= '2024-12-31'
GROUP BY p.category
ORDER BY revenue_cents DESC, p.category ASC;
