"""What a person reads: the text summary, goodput, the HTML report and its pytest plugin."""
