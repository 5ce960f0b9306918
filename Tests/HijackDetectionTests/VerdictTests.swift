import AddressProbing
import DNSCore
import HTTPDNS
import HijackDetection
import Testing

/// The verdict logic alone, from made-up answers and probe results.
struct VerdictTests {
    func ip(_ text: String) -> IPAddress { IPAddress(text)! }
    func answer(_ addresses: String...) -> ResolverAnswer { .addresses(addresses.map(ip)) }
    func probe(_ address: String, _ outcome: AddressProbe.Outcome) -> AddressProbe {
        AddressProbe(ip: ip(address), port: 443, outcome: outcome)
    }

    @Test func sameAddressesInAnyOrderAreConsistentWithoutProbes() {
        let verdict = Verdict.judge(
            host: "a.test", trusted: answer("192.0.2.1", "2001:db8::1"),
            system: answer("2001:db8::1", "192.0.2.1"), probes: [], probing: true)
        #expect(verdict.kind == .consistent)
        #expect(verdict.reason == "same addresses")
    }

    @Test func aSystemSubsetIsConsistent() {
        let verdict = Verdict.judge(
            host: "a.test", trusted: answer("192.0.2.1", "192.0.2.2"), system: answer("192.0.2.2"),
            probes: [], probing: false)
        #expect(verdict.kind == .consistent)
    }

    @Test func differentAddressesThatValidateAreConsistent() {
        // A CDN answering each resolver differently: both addresses prove they serve the name.
        let verdict = Verdict.judge(
            host: "cdn.test", trusted: answer("192.0.2.1"), system: answer("198.51.100.7"),
            probes: [probe("192.0.2.1", .ok), probe("198.51.100.7", .ok)], probing: true)
        #expect(verdict.kind == .consistent)
        #expect(verdict.reason.contains("198.51.100.7"))
    }

    @Test(arguments: [AddressProbe.Outcome.untrustedCertificate, .nameMismatch])
    func aSystemAddressFailingValidationWhileATrustedOnePassesIsHijacked(outcome: AddressProbe.Outcome) {
        let verdict = Verdict.judge(
            host: "bank.test", trusted: answer("192.0.2.1"), system: answer("198.51.100.66"),
            probes: [probe("192.0.2.1", .ok), probe("198.51.100.66", outcome)], probing: true)
        #expect(verdict.kind == .hijacked)
        #expect(verdict.reason.contains("198.51.100.66") && verdict.reason.contains(outcome.rawValue) && verdict.reason.contains("192.0.2.1"))
    }

    @Test func failingValidationWithoutATrustedProofIsOnlySuspicious() {
        let verdict = Verdict.judge(
            host: "bank.test", trusted: answer("192.0.2.1"), system: answer("198.51.100.66"),
            probes: [probe("192.0.2.1", .timeout), probe("198.51.100.66", .nameMismatch)], probing: true)
        #expect(verdict.kind == .suspicious)
    }

    @Test func anUnreachableSystemAddressIsSuspicious() {
        let verdict = Verdict.judge(
            host: "a.test", trusted: answer("192.0.2.1"), system: answer("198.51.100.9"),
            probes: [probe("192.0.2.1", .ok), probe("198.51.100.9", .connectFailed)], probing: true)
        #expect(verdict.kind == .suspicious)
        #expect(verdict.reason.contains("198.51.100.9"))
    }

    @Test func differingAnswersWithoutProbesAreSuspicious() {
        let verdict = Verdict.judge(
            host: "a.test", trusted: answer("192.0.2.1"), system: answer("198.51.100.9"),
            probes: [], probing: false)
        #expect(verdict.kind == .suspicious)
        #expect(verdict.reason.contains("not probed"))
    }

    @Test func onlyTheAAAADifferingIsJudgedOnThatAddress() {
        let verdict = Verdict.judge(
            host: "v6.test", trusted: answer("192.0.2.1", "2001:db8::1"),
            system: answer("192.0.2.1", "2001:db8::66"),
            probes: [probe("192.0.2.1", .ok), probe("2001:db8::1", .ok), probe("2001:db8::66", .untrustedCertificate)],
            probing: true)
        #expect(verdict.kind == .hijacked)
        #expect(verdict.reason.contains("2001:db8::66"))
    }

    @Test func answeringANameTheTrustedSideSaysDoesNotExistIsHijacked() {
        let verdict = Verdict.judge(
            host: "typo.test", trusted: .absent(.nxdomain), system: answer("198.51.100.80"),
            probes: [], probing: false)
        #expect(verdict.kind == .hijacked)
        #expect(verdict.reason.contains("NXDOMAIN") && verdict.reason.contains("198.51.100.80"))
    }

    @Test func denyingANameATrustedAddressProvesIsHijackedOtherwiseSuspicious() {
        let proven = Verdict.judge(
            host: "news.test", trusted: answer("192.0.2.1"), system: .absent(.nxdomain),
            probes: [probe("192.0.2.1", .ok)], probing: true)
        #expect(proven.kind == .hijacked)
        #expect(proven.reason.contains("blocking"))
        let unproven = Verdict.judge(
            host: "news.test", trusted: answer("192.0.2.1"), system: .absent(.nxdomain),
            probes: [], probing: false)
        #expect(unproven.kind == .suspicious)
    }

    @Test func bogonAnswersForAPublicNameAreHijacked() {
        let verdict = Verdict.judge(
            host: "site.test", trusted: answer("192.0.2.1"), system: answer("10.10.34.35"),
            probes: [], probing: false)
        // 192.0.2.1 is itself documentation space, so use a public address for the trusted side.
        #expect(verdict.kind == .suspicious, "both special-purpose: no bogon rule")
        let bogon = Verdict.judge(
            host: "site.test", trusted: answer("93.184.216.34"), system: answer("10.10.34.35"),
            probes: [], probing: false)
        #expect(bogon.kind == .hijacked)
        #expect(bogon.reason.contains("10.10.34.35"))
    }

    @Test func aSideThatFailedLeavesTheHostUnverified() {
        let failed = ResolverAnswer.failed(DNSError(.timeout, "timed out"))
        #expect(Verdict.judge(host: "a.test", trusted: failed, system: answer("192.0.2.1"), probes: [], probing: true).kind == .unverified)
        #expect(Verdict.judge(host: "a.test", trusted: answer("192.0.2.1"), system: failed, probes: [], probing: true).kind == .unverified)
        #expect(Verdict.judge(host: "a.test", trusted: .absent(.nxdomain), system: .absent(.nxdomain), probes: [], probing: true).kind == .consistent)
    }
}

/// DNSSEC evidence on top of the verdict (§3 of the DNSSEC issue).
struct DNSSECVerdictTests {
    func ip(_ text: String) -> IPAddress { IPAddress(text)! }
    func proven(_ answer: ResolverAnswer, _ status: DNSSECStatus?) -> ProvenAnswer { ProvenAnswer(answer, dnssec: status) }

    @Test func aSecureTrustedAnswerMakesADifferingSystemAnswerHijackedWithoutProbes() {
        let trusted = proven(.addresses([ip("192.0.2.77")]), .secure)
        let system = proven(.addresses([ip("198.18.66.66")]), .bogus("forged.sig.test A is not signed"))
        let base = Verdict.judge(host: "forged.sig.test", trusted: trusted.answer, system: system.answer, probes: [], probing: true)
        #expect(base.kind == .suspicious, "without DNSSEC: unproven (\(base.reason))")
        let verdict = base.withDNSSEC(host: "forged.sig.test", trusted: trusted, system: system)
        #expect(verdict.kind == .hijacked)
        #expect(verdict.reason.contains("DNSSEC-secure") && verdict.reason.contains("198.18.66.66"), "\(verdict.reason)")
        #expect(verdict.reason.contains("the system's answer fails DNSSEC validation: forged.sig.test A is not signed"), "\(verdict.reason)")
    }

    @Test func aSecureAnswerDeniedByTheSystemIsBlocking() {
        let verdict = Verdict.judge(host: "a.test", trusted: .addresses([ip("192.0.2.1")]), system: .absent(.nxdomain), probes: [], probing: false)
            .withDNSSEC(host: "a.test", trusted: proven(.addresses([ip("192.0.2.1")]), .secure), system: proven(.absent(.nxdomain), nil))
        #expect(verdict.kind == .hijacked && verdict.reason.contains("NXDOMAIN"), "\(verdict.reason)")
    }

    @Test func consistentStaysConsistentAndSaysSo() {
        let same = proven(.addresses([ip("192.0.2.11")]), .secure)
        let verdict = Verdict.judge(host: "a.test", trusted: same.answer, system: same.answer, probes: [], probing: true)
            .withDNSSEC(host: "a.test", trusted: same, system: same)
        #expect(verdict.kind == .consistent && verdict.reason == "same addresses; the trusted answer is DNSSEC-secure")
    }

    @Test func insecureOrUnvalidatedChangesNothingAndABogusTrustedSideIsDoubted() {
        let trusted = ResolverAnswer.addresses([ip("1.2.3.4")])  // public (nothing is contacted)
        let system = ResolverAnswer.addresses([ip("10.9.9.9")])
        let base = Verdict.judge(host: "a.test", trusted: trusted, system: system, probes: [], probing: false)
        #expect(base.kind == .hijacked, "a bogon")
        for status in [DNSSECStatus.insecure, .indeterminate("no anchor"), nil] {
            #expect(base.withDNSSEC(host: "a.test", trusted: proven(trusted, status), system: proven(system, nil)) == base)
        }
        let doubted = base.withDNSSEC(host: "a.test", trusted: proven(trusted, .bogus("bad signature")), system: proven(system, nil))
        #expect(doubted.kind == .suspicious && doubted.reason.contains("the trusted side itself is in doubt"), "\(doubted.reason)")
    }
}
