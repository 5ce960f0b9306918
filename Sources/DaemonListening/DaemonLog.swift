/// The source every log line of the daemon's listeners carries, whichever target writes it: the
/// daemon's log keeps the shape it had when one target held all of it (`[ResolverDaemon] listening`
/// is what operators and the test suites look for).
package enum DaemonLog {
    package static let source = "ResolverDaemon"
}
