import NIOCore

extension TimeAmount {
    /// A configured duration on NIO's clock: negative as 0, too long for 64-bit nanoseconds as the
    /// longest (never a trap on a configured value). The one conversion every listener uses.
    package init(setting duration: Duration) {
        let (seconds, attoseconds) = duration.components
        guard seconds >= 0 else {
            self = .zero
            return
        }
        let (whole, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        let (total, carried) = whole.addingReportingOverflow(max(0, attoseconds) / 1_000_000_000)
        self = .nanoseconds(overflow || carried ? .max : total)
    }
}
