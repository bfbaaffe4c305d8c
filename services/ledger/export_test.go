package ledger

// BusinessDaysSQL is businessDaysSQL, for the table test of its count.
var BusinessDaysSQL = businessDaysSQL
