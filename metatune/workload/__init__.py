"""What gets tuned: operator families and suites (`operators`), whole networks (`networks`) and the
tuning tasks Relax extracts from them (`relax_tasks`)."""
