"""suites/acceptance"""
