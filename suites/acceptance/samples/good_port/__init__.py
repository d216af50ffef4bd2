"""suites/acceptance/samples/good_port"""
