"""suites/properties"""
