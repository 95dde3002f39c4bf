CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, email TEXT);
INSERT INTO customers VALUES (1, 'Ada', 'ada@example.org'), (2, 'Linus', NULL);
