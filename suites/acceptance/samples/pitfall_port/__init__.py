"""suites/acceptance/samples/pitfall_port"""
