"""Image checks with no Django: decoding uploaded frames without trusting them (`checks`) and the pixel budgets
requests and background work are held to (`budget`)."""
