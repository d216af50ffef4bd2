"""suites/chaos"""
