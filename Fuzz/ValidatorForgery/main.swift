// A structure-aware fuzzer for the DNSSEC validator: it mutates genuine signed responses of the
// test tree (Scripts/env/testenv.sh `sign_tree`) the way a forger without keys can — moving RRsets,
// NSEC/NSEC3 records and RRSIGs between names, zones and sections, renaming owners, changing the
// RCODE, flipping bytes, lying in RRSIG fields — and checks one property on every input:
//
//     secure ⇒ the RRset proven is exactly the genuine RRset of that name and type,
//              or (a denial) the name and type are genuinely denied, with the same RCODE.
//
//   validator-forgery-fuzzer --doh URL --ca PEM --anchors FILE [--runs N] [--seconds S] [--seed N]
//                            [--replay SEED:ITERATION]...
//
// The genuine data is asked of the DoH server once (DO and CD) before the run; the chain (DS and
// DNSKEY sets) comes from that memo, so the run needs no network. Each input is reproducible from
// the seed and its iteration number, which is what a counterexample prints (replay it with
// --replay against a tree built the same way; the keys differ from run to run, the structure not).
import DNSCore
import DNSSEC
import Foundation
import HTTPDNS
import Synchronization
import TestSupport

struct Options {
    var doh = ""
    var ca = ""
    var anchors = ""
    var runs = 100_000
    var seconds = 600.0
    var seed: UInt64 = 1
    var replay: [(UInt64, Int)] = []

    init(_ arguments: [String]) {
        var index = 0
        func value() -> String {
            index += 1
            guard index < arguments.count else { fatalError("\(arguments[index - 1]) needs a value") }
            return arguments[index]
        }
        while index < arguments.count {
            switch arguments[index] {
            case "--doh": doh = value()
            case "--ca": ca = value()
            case "--anchors": anchors = value()
            case "--runs": runs = Int(value()) ?? runs
            case "--seconds": seconds = Double(value()) ?? seconds
            case "--seed": seed = UInt64(value()) ?? seed
            case "--replay":
                let parts = value().split(separator: ":")
                if parts.count == 2, let seed = UInt64(parts[0]), let iteration = Int(parts[1]) { replay.append((seed, iteration)) }
            default: fatalError("unknown argument \(arguments[index])")
            }
            index += 1
        }
    }
}

/// The project's SplitMix64 (TestSupport), seeded from the seed and the iteration: the same input
/// for the same pair everywhere.
struct Random {
    var generator: SplitMix64
    init(seed: UInt64, iteration: Int) {
        generator = SplitMix64(state: seed &* 0x9E37_79B9_7F4A_7C15 ^ UInt64(iteration) &* 0xBF58_476D_1CE4_E5B9)
    }
    mutating func next() -> UInt64 { generator.next() }
    mutating func below(_ bound: Int) -> Int { bound <= 1 ? 0 : Int(next() % UInt64(bound)) }
    mutating func pick<T>(_ items: [T]) -> T { items[below(items.count)] }
    mutating func chance(_ percent: Int) -> Bool { below(100) < percent }
}

/// The questions of the tree asked for truth, and the chain queries the validator makes.
let questions: [(String, RecordType)] = [
    ("www.sig.test", .a), ("www.sig.test", .aaaa), ("x.wild.sig.test", .a), ("real.wild.sig.test", .a), ("nx.sig.test", .a),
    ("alias.sig.test", .a), ("forged.sig.test", .a), ("www.dn.sig.test", .a), ("www.rsa.sig.test", .a), ("back.rsa.sig.test", .a),
    ("zzzz.rsa.sig.test", .a), ("rsaa.sig.test", .a), ("www.n3.sig.test", .a), ("www.n3.sig.test", .txt), ("nx.n3.sig.test", .a),
    ("x.wild.n3.sig.test", .a), ("www.insecure.sig.test", .a), ("www.unsigned.n3.sig.test", .a), ("rsa.sig.test", .nsec),
    ("rsa.sig.test", .soa), ("sig.test", .soa), ("n3.sig.test", .soa), ("www.badsig.sig.test", .a), ("www.expired.sig.test", .a),
    ("zz.sig.test", .a), ("a.sig.test", .aaaa), ("wild.sig.test", .a),
]

struct Key: Hashable, Sendable {
    var name: DomainName
    var type: RecordType
}

/// What the run knows for sure: the genuine response to each question and its validation.
final class Truth {
    var responses: [Key: DNSMessage] = [:]
    /// The questions in a fixed order (what a seed and iteration pick from).
    var keys: [Key] = []
    /// Every genuine RRset of the tree by owner and type, as some zone signed it. At a zone cut an
    /// NSEC exists in both zones (the parent's and the child's apex): either is genuine data.
    var genuineRRsets: [Key: [Set<RecordData>]] = [:]
    var verdicts: [Key: (status: DNSSECStatus, rrset: Set<RecordData>, rcode: ResponseCode)] = [:]
}

func key(_ name: String, _ type: RecordType) -> Key { Key(name: try! DomainName(name), type: type) }

/// A record without its TTL: what a signature covers (the RRSIG carries the original TTL), so an
/// RRset with other TTLs is the same signed data.
struct RecordData: Hashable {
    var name: DomainName
    var type: RecordType
    var recordClass: UInt16
    var data: DNSMessage.RecordData

    init(_ record: DNSMessage.Record) { (name, type, recordClass, data) = (record.name, record.type, record.recordClass, record.data) }
}

func rrsets(of message: DNSMessage) -> [[DNSMessage.Record]] {
    var groups: [Key: [DNSMessage.Record]] = [:]
    var order: [Key] = []
    for record in message.answers + message.authorities where record.type != .opt {
        var type = record.type
        if record.type == .rrsig, case .opaque(let rdata) = record.data, rdata.count >= 2 {
            type = RecordType(rawValue: 0xF000 | (UInt16(rdata[0]) << 8 | UInt16(rdata[1])) & 0x0FFF)  // grouped by what it covers
        }
        let groupKey = Key(name: record.name, type: type)
        if groups[groupKey] == nil { order.append(groupKey) }
        groups[groupKey, default: []].append(record)
    }
    return order.map { groups[$0]! }
}

func renamed(_ records: [DNSMessage.Record], to name: DomainName) -> [DNSMessage.Record] {
    records.map { DNSMessage.Record(name: name, type: $0.type, recordClass: $0.recordClass, ttl: $0.ttl, data: $0.data) }
}

/// One forged response for `target` from the pool, by a few structure-level mutations.
func forge(target: Key, truth: Truth, pool: [[DNSMessage.Record]], names: [DomainName], random: inout Random) -> (DNSMessage, [String]) {
    var log: [String] = []
    let keys = truth.keys
    let base = truth.responses[random.chance(50) ? target : random.pick(keys)]!
    var answers = base.answers.filter { $0.type != .opt }
    var authorities = base.authorities
    var flags = base.flags
    for _ in 0..<(1 + random.below(4)) {
        switch random.below(9) {
        case 0:  // a pool RRset (with or without its signatures) into a section, maybe renamed
            var set = random.pick(pool)
            if random.chance(40) { set = renamed(set, to: random.chance(60) ? target.name : random.pick(names)) }
            if random.chance(50) { answers += set } else { authorities += set }
            log.append("add \(set[0].name) \(set[0].type)")
        case 1:  // drop a record
            if !answers.isEmpty, random.chance(50) {
                answers.remove(at: random.below(answers.count))
            } else if !authorities.isEmpty {
                authorities.remove(at: random.below(authorities.count))
            }
            log.append("drop")
        case 2:  // move everything of one owner between sections
            if let record = (answers + authorities).randomElement(using: &random) {
                let moving = (answers + authorities).filter { $0.name == record.name }
                let toAnswer = authorities.contains(record)
                answers.removeAll { $0.name == record.name }
                authorities.removeAll { $0.name == record.name }
                if toAnswer { answers += moving } else { authorities += moving }
                log.append("move \(record.name)")
            }
        case 3:  // rename one RRset's owner (its signatures too)
            if let record = (answers + authorities).randomElement(using: &random) {
                let name = random.chance(50) ? target.name : random.pick(names)
                answers = answers.map { $0.name == record.name ? renamed([$0], to: name)[0] : $0 }
                authorities = authorities.map { $0.name == record.name ? renamed([$0], to: name)[0] : $0 }
                log.append("rename \(record.name) → \(name)")
            }
        case 4:  // the RCODE
            flags = flags & ~0x000F | (random.chance(50) ? 3 : 0)
            log.append("rcode \(flags & 0xF)")
        case 5:  // flip a byte of a record's data
            var all = answers + authorities
            guard !all.isEmpty else { break }
            let index = random.below(all.count)
            switch all[index].data {
            case .opaque(var bytes) where !bytes.isEmpty:
                bytes[random.below(bytes.count)] ^= UInt8(1 << random.below(8))
                all[index].data = .opaque(bytes)
            case .address(let ip):
                var bytes = ip.bytes
                bytes[random.below(bytes.count)] ^= UInt8(1 << random.below(8))
                all[index].data = .address(IPAddress(bytes: bytes)!)
            default: break
            }
            answers = Array(all[..<answers.count])
            authorities = Array(all[answers.count...])
            log.append("flip \(all[index].name) \(all[index].type)")
        case 6:  // an RRSIG's labels field (wildcard claims)
            var all = answers + authorities
            if let index = all.indices.filter({ all[$0].type == .rrsig }).randomElement(using: &random),
                case .opaque(var bytes) = all[index].data, bytes.count > 3
            {
                bytes[3] = UInt8(random.below(5))
                all[index].data = .opaque(bytes)
                answers = Array(all[..<answers.count])
                authorities = Array(all[answers.count...])
                log.append("labels \(bytes[3])")
            }
        case 7:  // strip every signature, or every denial record
            if random.chance(50) {
                answers.removeAll { $0.type == .rrsig }
                authorities.removeAll { $0.type == .rrsig }
                log.append("strip RRSIGs")
            } else {
                authorities.removeAll { $0.type == .nsec || $0.type == .nsec3 }
                log.append("strip denial")
            }
        default:  // another question's whole authority section (its denial)
            let other = truth.responses[random.pick(keys)]!
            authorities = other.authorities
            log.append("authority of \(other.questions.first.map { "\($0.name) \($0.type)" } ?? "?")")
        }
    }
    let message = DNSMessage(
        id: 0, flags: flags, questions: [.init(name: target.name, type: target.type)], answers: answers, authorities: authorities)
    return (message, log)
}

extension Array {
    func randomElement(using random: inout Random) -> Element? { isEmpty ? nil : self[random.below(count)] }
}

@main
struct ValidatorForgeryFuzzer {
    static func main() async throws {
        let options = Options(Array(CommandLine.arguments.dropFirst()))
        let resolver = try HTTPDNSResolver(
            configuration: .init(upstreams: [try UpstreamEndpoint.doh(options.doh, bootstrap: ["127.0.0.1"])], caFile: options.ca),
            options: HTTPDNSOptions(timeout: .seconds(6)))
        let anchors = try TrustAnchors(presentation: String(contentsOfFile: options.anchors, encoding: .utf8))
        let now = UInt32(Date.now.timeIntervalSince1970)

        // The chain, memoized: every DS and DNSKEY the validator asks for during warm-up.
        let memo = Memo()
        let fetch: DNSSECValidator.Fetch = { name, type in
            if let known = memo.get(Key(name: name, type: type)) { return known }
            let message = try DNSMessage(decoding: try await resolver.forward(DNSMessage.validatingQuery(name, type).encode()))
            memo.set(Key(name: name, type: type), message)
            return message
        }
        let truth = Truth()
        let cache = DNSSECChainCache()
        let validator = DNSSECValidator(anchors: anchors, cache: cache, fetch: fetch)
        for (name, type) in questions {
            let question = key(name, type)
            let response = try await fetch(question.name, question.type)
            truth.responses[question] = response
            let (status, rrset) = await validator.validateAnswer(response, name: question.name, type: type, now: now)
            truth.verdicts[question] = (status, Set(rrset.map(RecordData.init)), response.responseCode)
        }
        for zone in ["sig.test", "rsa.sig.test", "n3.sig.test", "insecure.sig.test", "unsigned.n3.sig.test", "badsig.sig.test"] {
            for type in [RecordType.ds, .dnskey] { _ = try? await fetch(try DomainName(zone), type) }
        }
        memo.freeze()
        let pool = truth.responses.values.flatMap(rrsets(of:)).sorted {
            "\($0[0].name)\($0[0].type.rawValue)" < "\($1[0].name)\($1[0].type.rawValue)"
        }
        let names = Array(Set(pool.map { $0[0].name } + truth.responses.keys.map(\.name))).sorted { $0.description < $1.description }
        let targets = truth.responses.keys.sorted { "\($0.name)\($0.type.rawValue)" < "\($1.name)\($1.type.rawValue)" }
        truth.keys = targets
        for set in pool where set[0].type != .rrsig {
            truth.genuineRRsets[Key(name: set[0].name, type: set[0].type), default: []].append(Set(set.map(RecordData.init)))
        }
        print("validator forgery fuzzer: \(truth.responses.count) genuine answers, \(pool.count) RRsets in the pool, \(names.count) names")
        for (question, verdict) in truth.verdicts.sorted(by: { $0.key.name.description < $1.key.name.description }) {
            print("  truth \(question.name) \(question.type): \(verdict.status.name) \(verdict.rcode) \(verdict.rrset.count) records")
        }

        let run = Run(truth: truth, pool: pool, names: names, targets: targets, validator: validator, now: now)
        var counterexamples: [String] = []
        var secure = 0
        let started = ContinuousClock.now
        var executions = 0
        if !options.replay.isEmpty {
            for (seed, iteration) in options.replay {
                let outcome = await run.check(iteration: iteration, seed: seed)
                if outcome.secure { secure += 1 }
                if let counterexample = outcome.counterexample { counterexamples.append(counterexample) }
            }
            executions = options.replay.count
        } else {
            let deadline = started + .seconds(options.seconds)
            while executions < options.runs, executions % 1024 != 0 || ContinuousClock.now < deadline {
                let outcome = await run.check(iteration: executions, seed: options.seed)
                if outcome.secure { secure += 1 }
                if let counterexample = outcome.counterexample { counterexamples.append(counterexample) }
                executions += 1
                if executions % 500_000 == 0 {
                    print("  \(executions) executions, \(secure) secure, \(counterexamples.count) counterexamples, \(ContinuousClock.now - started)")
                }
            }
        }
        let elapsed = ContinuousClock.now - started
        print("executions: \(executions) in \(elapsed) (seed \(options.seed)); secure: \(secure); counterexamples: \(counterexamples.count)")
        for counterexample in counterexamples.prefix(50) { print("COUNTEREXAMPLE " + counterexample) }
        print("fuzz: \(executions - counterexamples.count) passed, \(counterexamples.count) failed")
        exit(counterexamples.isEmpty ? 0 : 1)
    }
}

/// What one input needs: the truth, the pool to forge from, and the validator.
struct Run {
    let truth: Truth
    let pool: [[DNSMessage.Record]]
    let names: [DomainName]
    let targets: [Key]
    let validator: DNSSECValidator
    let now: UInt32

    /// One input: whether it validated secure, and the counterexample when that was wrong.
    func check(iteration: Int, seed: UInt64) async -> (secure: Bool, counterexample: String?) {
        var random = Random(seed: seed, iteration: iteration)
        let target = random.pick(targets)
        let (forged, log) = forge(target: target, truth: truth, pool: pool, names: names, random: &random)
        let (status, rrset) = await validator.validateAnswer(forged, name: target.name, type: target.type, now: now)
        guard status == .secure else { return (false, nil) }
        let genuine = truth.verdicts[target]!
        let problem: String?
        if !rrset.isEmpty {
            let proven = Set(rrset.map(RecordData.init))
            let signedSomewhere = truth.genuineRRsets[target, default: []].contains(proven)
            problem =
                (genuine.status == .secure && proven == genuine.rrset) || signedSomewhere
                ? nil : "a secure RRset that is not the genuine one: \(proven.map { "\($0.name) \($0.type) \($0.data)" })"
        } else {
            problem =
                genuine.status == .secure && genuine.rrset.isEmpty && genuine.rcode == forged.responseCode
                ? nil : "a secure denial that is not the genuine one (\(forged.responseCode), genuinely \(genuine.rcode))"
        }
        return (true, problem.map { "\(seed):\(iteration) \(target.name) \(target.type): \($0); mutations: \(log.joined(separator: ", "))" })
    }
}

/// The genuine chain answers; after warm-up nothing new is kept (a miss asks the server).
final class Memo: Sendable {
    private let state = Mutex<(answers: [Key: DNSMessage], frozen: Bool)>(([:], false))

    func get(_ key: Key) -> DNSMessage? { state.withLock { $0.answers[key] } }
    func set(_ key: Key, _ message: DNSMessage) { state.withLock { if !$0.frozen { $0.answers[key] = message } } }
    func freeze() { state.withLock { $0.frozen = true } }
}
