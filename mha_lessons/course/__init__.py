"""The course's machinery: what shows, records and checks the lessons, kept apart from the lesson code."""
