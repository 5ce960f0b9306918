/// Raw query bytes, written out by hand so each test shows the exact shape it sends.
public enum Wire {
    public static func header(
        id: UInt16 = 0x1234, flags: UInt16 = 0x0100, questions: UInt16 = 1, answers: UInt16 = 0, authorities: UInt16 = 0,
        additionals: UInt16 = 0
    ) -> [UInt8] {
        [id, flags, questions, answers, authorities, additionals].flatMap { [UInt8($0 >> 8), UInt8($0 & 0xff)] }
    }

    public static func name(_ text: String) -> [UInt8] {
        text.split(separator: ".").flatMap { [UInt8($0.utf8.count)] + Array($0.utf8) } + [0]
    }

    public static func question(_ text: String, type: UInt16 = 1, class recordClass: UInt16 = 1) -> [UInt8] {
        name(text) + [UInt8(type >> 8), UInt8(type & 0xff), UInt8(recordClass >> 8), UInt8(recordClass & 0xff)]
    }

    /// An OPT record: root owner, `size`, version, DO, the given option bytes.
    public static func opt(size: UInt16 = 1232, version: UInt8 = 0, dnssecOK: Bool = false, options: [UInt8] = []) -> [UInt8] {
        [
            0, 0, 41, UInt8(size >> 8), UInt8(size & 0xff), 0, version, dnssecOK ? 0x80 : 0, 0,
            UInt8(options.count >> 8), UInt8(options.count & 0xff),
        ] + options
    }

    public static func query(_ text: String, type: UInt16 = 1, id: UInt16 = 0x1234, edns: [UInt8]? = nil) -> [UInt8] {
        header(id: id, additionals: edns == nil ? 0 : 1) + question(text, type: type) + (edns ?? [])
    }
}
