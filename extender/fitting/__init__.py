"""What-if questions: would a gang, submitted now, start; where; and if not, what would it take."""
