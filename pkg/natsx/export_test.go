package natsx

// HandlerTimeouts is handlerTimeouts, for the tests.
var HandlerTimeouts = handlerTimeouts
