/// The vendors' published service IPs (docs/commercial-apis.md, "Wire notes"), so that `region: cn` needs
/// no endpoint. These reach the public internet: the tests check them offline only, never contact them.
public struct VendorServiceIPs: Sendable, Hashable {
    /// The IPs, first one first; the rest are failover targets.
    public var serviceIPs: [String]
    /// The IP for APIs reached over HTTPS, and the one for plain HTTP (Tencent's encrypted mode).
    public var httpsIP: String
    public var httpIP: String?
    /// The name the certificate is checked against (Alibaba's SDKs check `203.107.1.1` whichever
    /// service IP they reach), or nil for the IP connected to.
    public var tlsName: String?

    /// The endpoint URL for `api`: HTTPS unless the API mode is Tencent's encrypted HTTP one.
    public func endpoint(for api: VendorAPI) -> String {
        if case .tencent = api, let httpIP { return "http://\(httpIP)" }
        return "https://\(httpsIP.contains(":") ? "[\(httpsIP)]" : httpsIP)"
    }

    /// The regions known for `vendor`.
    public static func regions(vendor: String) -> [String] {
        switch vendor {
        case "alibaba": return ["cn", "hk", "sg", "de", "us"]
        case "tencent": return ["cn", "intl"]
        case "baidu": return ["cn"]
        default: return []
        }
    }

    /// The preset for `vendor` in `region`, or nil.
    public static func preset(vendor: String, region: String) -> VendorServiceIPs? {
        switch (vendor, region.lowercased()) {
        case ("alibaba", "cn"):
            return alibaba([
                "203.107.1.1", "203.107.1.97", "203.107.1.100", "203.119.238.240", "106.11.25.239", "59.82.99.47",
                "2401:b180:7001::31d", "2401:b180:2000:30::1c", "2401:b180:2000:20::10",
            ])
        case ("alibaba", "hk"): return alibaba(["47.56.234.194", "47.56.119.115", "240b:4000:f10::178", "240b:4000:f10::188"])
        case ("alibaba", "sg"): return alibaba(["161.117.200.122", "47.74.222.190", "240b:4000:f10::178", "240b:4000:f10::188"])
        case ("alibaba", "de"): return alibaba(["47.89.80.182", "47.246.146.77", "2404:2280:3000::176", "2404:2280:3000::188"])
        case ("alibaba", "us"): return alibaba(["47.246.131.175", "47.246.131.141", "2404:2280:4000::2bb", "2404:2280:4000::23e"])
        // Tencent's production service IPs are not public; these are its documented entry points
        // (HTTP for DES/AES, HTTPS for the token mode).
        case ("tencent", "cn"): return VendorServiceIPs(serviceIPs: [], httpsIP: "119.29.29.99", httpIP: "119.29.29.98", tlsName: nil)
        case ("tencent", "intl"): return VendorServiceIPs(serviceIPs: [], httpsIP: "43.132.55.56", httpIP: "43.132.55.55", tlsName: nil)
        case ("baidu", "cn"): return VendorServiceIPs(serviceIPs: [], httpsIP: "180.76.76.200", httpIP: nil, tlsName: nil)
        default: return nil
        }
    }

    private static func alibaba(_ ips: [String]) -> VendorServiceIPs {
        VendorServiceIPs(serviceIPs: Array(ips.dropFirst()), httpsIP: ips[0], httpIP: nil, tlsName: "203.107.1.1")
    }
}
