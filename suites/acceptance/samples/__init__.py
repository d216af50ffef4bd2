"""suites/acceptance/samples"""
