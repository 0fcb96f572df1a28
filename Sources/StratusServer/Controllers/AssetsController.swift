import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import NIOPosix
import StratusCore
import StratusStore
import _NIOFileSystem

/// Assets (CKWS §7): `assets/upload` hands out upload URLs; the bytes are POSTed to one and come
/// back as `{singleFile: {fileChecksum, size, receipt}}`; the receipt saved as an ASSETID field
/// attaches the asset; records read back carry a signed, expiring `downloadURL` per asset.
/// Upload and download URLs are capabilities: sealed tokens (`TokenSealer`) naming what they
/// allow, no API token needed.
struct AssetsController: Sendable {
    let records: RecordStore
    let assets: AssetStore
    let sealer: TokenSealer
    let configuration: ServerConfiguration
    let schemas: SchemaReads

    static let uploadPathPrefix = "/assets/1/upload/"
    static let downloadPathPrefix = "/assets/1/download/"
    static let uploadPurpose = "asset-upload"
    static let receiptPurpose = "asset-receipt"
    static let downloadPurpose = "asset-download"
    /// Most upload URLs one `assets/upload` hands out (CloudKit's limit).
    static let maximumUploadTokens = 200

    func addRoutes(to router: Router<BasicRequestContext>) {
        router.post("/assets/1/upload/:token") { request, context -> Response in
            try await self.receiveUpload(request, token: context.parameters.get("token") ?? "")
        }
        for method in [HTTPRequest.Method.get, .head] {
            router.on("/assets/1/download/:token", method: method) { request, context -> Response in
                try await self.download(request, token: context.parameters.get("token") ?? "", context: context)
            }
        }
    }

    static func isAssetPath(_ path: String) -> Bool { path.hasPrefix("/assets/1/") }

    /// A browser's preflight for an upload or download URL.
    static func assetPreflight() -> Response {
        var response = Response(status: .noContent)
        addAssetCORSHeaders(&response)
        response.headers[.accessControlAllowMethods] = "GET, HEAD, POST"
        response.headers[.accessControlAllowHeaders] = "Content-Type, Content-Digest, Range"
        response.headers[.accessControlMaxAge] = "600"
        return response
    }

    static func addAssetCORSHeaders(_ response: inout Response) {
        response.headers[.accessControlAllowOrigin] = "*"
        response.headers[.accessControlExposeHeaders] = "Content-Length, Content-Range, Accept-Ranges, ETag"
    }

    private func millisecondsFromNow(_ duration: Duration) -> Int64 {
        AssetLinks.millisecondsFromNow(duration)
    }

    // MARK: assets/upload

    /// `assets/upload`: one upload URL per token, bound to the container, environment, database,
    /// user, record type and field, valid `uploadURLLifetime`.
    func requestUploads(_ request: DataRequest) async throws -> JSON {
        let user = try request.caller.requireUser(signInURL: request.signInURL)
        if request.scope != .shared { _ = try request.zoneName(request.body["zoneID"]) }
        guard let list = request.body["tokens"] else { throw StratusError.badRequest("missing required key 'tokens': [{\"recordType\", \"fieldName\", \"recordName\"?}]") }
        guard let items = list.arrayValue, !items.isEmpty else { throw StratusError.badRequest("'tokens' must be a non-empty array of {\"recordType\", \"fieldName\", \"recordName\"?}") }
        guard items.count <= Self.maximumUploadTokens else {
            throw StratusError.badRequest("\(items.count) upload tokens asked for; at most \(Self.maximumUploadTokens) per request")
        }
        let schema = try await records.schemas.schema(containerID: request.caller.container.id, environment: request.caller.environment)
        let expires = millisecondsFromNow(configuration.uploadURLLifetime)
        var tokens: [JSON] = []
        for (index, item) in items.enumerated() {
            guard let members = item.objectValue else { throw StratusError.badRequest("tokens[\(index)] must be an object") }
            guard let field = try Wire.string(members["fieldName"], key: "tokens[\(index)].fieldName") else {
                throw StratusError.badRequest("tokens[\(index)] needs a 'fieldName': the record's asset field")
            }
            try Names.validateFieldName(field)
            let recordType = try Wire.string(members["recordType"], key: "tokens[\(index)].recordType")
            if let recordType {
                try Names.validateRecordType(recordType)
                if let known = schema.field(field, of: recordType)?.type, known.scalar != .asset {
                    throw StratusError.badRequest("tokens[\(index)]: field '\(field)' of '\(recordType)' is \(known.wireName), not an asset field")
                }
                if request.caller.environment == .production, schema.field(field, of: recordType) == nil {
                    throw StratusError.badRequest("tokens[\(index)]: record type '\(recordType)' has no asset field '\(field)' in the production schema; add it in development and deploy the schema")
                }
            } else if request.caller.environment == .production {
                throw StratusError.badRequest("tokens[\(index)] needs a 'recordType' in production")
            }
            let recordName = try Wire.string(members["recordName"], key: "tokens[\(index)].recordName") ?? RandomUUID.string(uppercase: true)
            try Names.validateRecordName(recordName)
            var payload: [String: JSON] = ["c": .int(request.caller.container.id.rawValue), "e": .string(request.caller.environment.rawValue),
                                           "d": .string(request.scope.rawValue), "o": .string(user.rawValue), "f": .string(field),
                                           "r": .string(recordName), "x": .int(expires)]
            if let recordType { payload["t"] = .string(recordType) }
            let url = configuration.publicURL + Self.uploadPathPrefix + sealer.seal(.object(payload), purpose: Self.uploadPurpose)
            var token: [String: JSON] = ["recordName": .string(recordName), "fieldName": .string(field), "url": .string(url)]
            if let recordType { token["recordType"] = .string(recordType) }
            tokens.append(.object(token))
        }
        return ["tokens": .array(tokens)]
    }

    // MARK: The upload

    /// The bytes POSTed to an upload URL: streamed to the staging file while hashed and counted,
    /// then stored under their hash. Answers the receipt that attaches them to a record.
    func receiveUpload(_ request: Request, token: String) async throws -> Response {
        guard let payload = sealer.open(token, purpose: Self.uploadPurpose)?.objectValue,
              case .int(let rawContainerID)? = payload["c"], case .int(let expires)? = payload["x"],
              let environment = payload["e"]?.stringValue, let scope = payload["d"]?.stringValue, let owner = payload["o"]?.stringValue,
              let field = payload["f"]?.stringValue else {
            throw StratusError(.authenticationFailed, "this upload URL is not one Stratus made; ask assets/upload for one")
        }
        let containerID = ContainerID(rawContainerID)
        guard expires > now() else {
            throw StratusError(.authenticationFailed, "this upload URL expired (they last \(configuration.uploadURLLifetime.components.seconds / 60) minutes); ask assets/upload for a new one")
        }
        let limit = configuration.maximumAssetBytes
        if let length = request.headers[.contentLength].flatMap({ Int64($0) }), length > limit {
            throw Self.assetTooLarge(length, limit: limit)
        }
        let expectedDigest = try Self.contentDigest(request.headers)
        let staged = assets.stagingPath()
        var committed = false
        defer { if !committed { unlink(staged) } }
        let (digest, size) = try await stage(request.body, at: staged, limit: limit)
        if let expectedDigest, expectedDigest != digest {
            throw StratusError.badRequest("the upload's bytes do not match its Content-Digest (SHA-256): it was changed or cut on the way; nothing was stored, upload it again")
        }
        if let length = request.headers[.contentLength].flatMap({ Int64($0) }), length != size {
            throw StratusError.badRequest("the upload ended after \(size) of its \(length) bytes; nothing was stored, upload it again")
        }
        let checksum = Data(digest).base64EncodedString()
        let contentType = Self.storedContentType(request.headers[.contentType])
        committed = true
        try await assets.commit(containerID: containerID, stagedAt: staged, checksum: checksum, size: size, contentType: contentType)
        var receipt: [String: JSON] = ["c": .int(containerID.rawValue), "e": .string(environment), "d": .string(scope), "o": .string(owner),
                                       "f": .string(field), "k": .string(checksum), "s": .int(size),
                                       "x": .int(millisecondsFromNow(configuration.assetReceiptLifetime))]
        if let recordType = payload["t"] { receipt["t"] = recordType }
        return .json(["singleFile": ["fileChecksum": .string(checksum), "size": .int(size),
                                     "receipt": .string(sealer.seal(.object(receipt), purpose: Self.receiptPurpose))]])
    }

    static func assetTooLarge(_ size: Int64, limit: Int64) -> StratusError {
        var error = StratusError(.badRequest, "the asset is \(size) bytes; an asset may be at most \(limit) bytes")
        error.code = StratusError.Code("BAD_REQUEST", httpStatus: 413)
        return error
    }

    /// Writes a request body to `path` as it arrives, hashing it (SHA-256) and stopping past `limit`.
    func stage(_ body: RequestBody, at path: String, limit: Int64) async throws -> (digest: [UInt8], size: Int64) {
        var hasher = SHA256()
        var size: Int64 = 0
        try await FileSystem.shared.withFileHandle(forWritingAt: FilePath(path), options: .newFile(replaceExisting: false)) { handle in
            try await handle.withBufferedWriter(capacity: .bytes(256 * 1024)) { writer in
                for try await chunk in body {
                    size += Int64(chunk.readableBytes)
                    guard size <= limit else { throw Self.assetTooLarge(size, limit: limit) }
                    chunk.withUnsafeReadableBytes { hasher.update(bufferPointer: $0) }
                    try await writer.write(contentsOf: chunk)
                }
                try await writer.flush()
            }
            // Acknowledged bytes survive a crash.
            try await handle.synchronize()
        }
        return (Array(hasher.finalize()), size)
    }

    /// The SHA-256 a client declared for its upload (`Content-Digest: sha-256=:<base64>:`, RFC 9530), if any.
    static func contentDigest(_ headers: HTTPFields) throws(StratusError) -> [UInt8]? {
        guard let name = HTTPField.Name("Content-Digest"), let value = headers[name] else { return nil }
        for part in value.split(separator: ",") {
            let pair = part.trimmingCharacters(in: .whitespaces).split(separator: "=", maxSplits: 1)
            guard pair.count == 2, pair[0].lowercased() == "sha-256" else { continue }
            let encoded = pair[1].trimmingCharacters(in: CharacterSet(charactersIn: ":"))
            guard let data = Data(base64Encoded: encoded), data.count == 32 else {
                throw .badRequest("Content-Digest's sha-256 must be the base64 of 32 bytes between colons, e.g. sha-256=:…=:")
            }
            return Array(data)
        }
        return nil
    }

    /// The content type kept with an asset (the first upload's), or `application/octet-stream`.
    static func storedContentType(_ header: String?) -> String {
        guard let header, header.utf8.count <= 200,
              header.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }), header.contains("/") else { return "application/octet-stream" }
        return header
    }

    // MARK: Receipts

    // MARK: Download

    /// Serves an asset's bytes (all, or one `Range`), streamed from the store.
    func download(_ request: Request, token: String, context: BasicRequestContext) async throws -> Response {
        guard let payload = sealer.open(token, purpose: Self.downloadPurpose)?.objectValue,
              case .int(let rawContainerID)? = payload["c"], case .int(let expires)? = payload["x"],
              let checksum = payload["k"]?.stringValue else {
            throw StratusError(.authenticationFailed, "this download URL is not one Stratus made; read the record for its downloadURL")
        }
        let containerID = ContainerID(rawContainerID)
        guard expires > now() else {
            throw StratusError(.authenticationFailed, "this download URL expired; read the record again for a fresh downloadURL")
        }
        guard let asset = try await assets.asset(containerID: containerID, checksum: checksum) else {
            throw StratusError(.notFound, "this asset is no longer stored (no record holds it)")
        }
        var range = 0..<asset.size
        var status = HTTPResponse.Status.ok
        var headers: HTTPFields = [.contentType: asset.contentType, .acceptRanges: "bytes", .eTag: "\"\(checksum)\"",
                                   .cacheControl: "private, max-age=\(max(0, (expires - now()) / 1000))"]
        if let header = request.headers[.range], let asked = try Self.byteRange(header, size: asset.size) {
            range = asked
            status = .partialContent
            headers[.contentRange] = "bytes \(asked.lowerBound)-\(asked.upperBound - 1)/\(asset.size)"
        }
        let length = Int(range.count)
        RequestConnection.current?.streamAnswer()
        guard length > 0 else { return Response(status: status, headers: headers, body: ResponseBody()) }
        let body: ResponseBody
        if let oid = asset.largeObject {
            let (store, range) = (assets, range)
            body = ResponseBody(contentLength: length) { writer in
                var offset = range.lowerBound
                while offset < range.upperBound {
                    let piece = Int(min(Int64(AssetStore.pieceBytes), range.upperBound - offset))
                    try await writer.write(try await store.readLargeObject(oid, offset: offset, length: piece))
                    offset += Int64(piece)
                }
                try await writer.finish(nil)
            }
        } else {
            guard let path = assets.filePath(containerID: containerID, checksum: checksum) else {
                throw StratusError(.internalError, "the asset store has no file for this asset")
            }
            body = try await FileIO(threadPool: .singleton).loadFile(path: path, range: Int(range.lowerBound)...Int(range.upperBound - 1),
                                                                    context: context)
        }
        return Response(status: status, headers: headers, body: body)
    }

    /// The one byte range a `Range: bytes=…` header asks for; `nil` (the whole file) for forms
    /// not served (several ranges, other units). A range outside the file is refused (416).
    static func byteRange(_ header: String, size: Int64) throws(StratusError) -> Range<Int64>? {
        guard header.hasPrefix("bytes="), !header.contains(",") else { return nil }
        let spec = header.dropFirst(6).trimmingCharacters(in: .whitespaces)
        let parts = spec.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2 else { throw unsatisfiable(header, size: size) }
        let range: Range<Int64>
        if parts[0].isEmpty {
            guard let suffix = Int64(parts[1]), suffix > 0 else { throw unsatisfiable(header, size: size) }
            range = max(0, size - suffix)..<size
        } else {
            guard let first = Int64(parts[0]) else { throw unsatisfiable(header, size: size) }
            let last = parts[1].isEmpty ? size - 1 : (Int64(parts[1]) ?? -1)
            guard first >= 0, last >= first, first < size else { throw unsatisfiable(header, size: size) }
            range = first..<min(last, size - 1) + 1
        }
        guard !range.isEmpty else { throw unsatisfiable(header, size: size) }
        return range
    }

    static func unsatisfiable(_ header: String, size: Int64) -> StratusError {
        var error = StratusError(.badRequest, "the Range '\(header.prefix(80))' is outside the asset's \(size) bytes (bytes 0–\(max(size - 1, 0)))")
        error.code = StratusError.Code("BAD_REQUEST", httpStatus: 416)
        return error
    }

    // MARK: assets/rereference

    /// `assets/rereference`: fresh receipts for the assets records already hold, to save them into
    /// other records (of any type and field) without uploading again.
    func rereferenceAssets(_ request: DataRequest) async throws -> JSON {
        let user = try request.caller.requireUser(signInURL: request.signInURL)
        guard let list = request.body["assets"]?.arrayValue, !list.isEmpty else {
            throw StratusError.badRequest("'assets' must be a non-empty array of {\"recordName\", \"fieldName\"}")
        }
        guard list.count <= Self.maximumUploadTokens else {
            throw StratusError.badRequest("\(list.count) assets asked for; at most \(Self.maximumUploadTokens) per request")
        }
        var wanted: [(name: String, field: String)] = []
        for (index, item) in list.enumerated() {
            guard let name = item["recordName"]?.stringValue, let field = item["fieldName"]?.stringValue else {
                throw StratusError.badRequest("assets[\(index)] needs 'recordName' and 'fieldName'")
            }
            try Names.validateRecordName(name)
            try Names.validateFieldName(field)
            wanted.append((name, field))
        }
        let names = Array(Set(wanted.map(\.name)))
        let found: [String: Record]
        let containerID = request.caller.container.id
        if request.scope == .shared {
            let (owner, zone) = try request.sharedZoneName(request.body["zoneID"])
            guard let (_, records) = try await records.sharing.sharedLookup(containerID: containerID, environment: request.caller.environment,
                                                                    user: user, owner: owner, zone: zone, names: names) else {
                throw SharesController.notShared(owner: owner, zone: zone)
            }
            found = records
        } else {
            let db = try request.database(requireUser: true)
            var records = try await records.lookup(db, zone: try request.zoneName(request.body["zoneID"]), names: names)
            if request.access != nil {
                let readable = try await schemas.readable(Array(records.values), by: request, in: db)
                records = Dictionary(readable.map { ($0.recordName, $0) }, uniquingKeysWith: { a, _ in a })
            }
            found = records
        }
        let expires = millisecondsFromNow(configuration.assetReceiptLifetime)
        var held: [(item: Int, asset: AssetValue)] = []
        lazy var uuid = newUUID()
        var answers: [JSON?] = Array(repeating: nil, count: wanted.count)
        for (index, item) in wanted.enumerated() {
            guard let record = found[item.name] else {
                answers[index] = StratusError(.notFound, "record '\(Names.printable(item.name))' does not exist").dictionary(uuid: uuid, recordName: item.name)
                continue
            }
            let fields = record.fields.isEmpty ? (record.encodedFields.flatMap { try? Record.decodeFields($0) } ?? [:]) : record.fields
            let fieldAssets = fields[item.field]?.assets ?? []
            guard !fieldAssets.isEmpty else {
                answers[index] = StratusError.badRequest("record '\(Names.printable(item.name))' holds no asset in field '\(item.field)'").dictionary(uuid: uuid, recordName: item.name)
                continue
            }
            for asset in fieldAssets { held.append((index, asset)) }
        }
        let stored = try await assets.use(containerID: containerID, checksums: Set(held.map(\.asset.fileChecksum)))
        var out: [JSON] = []
        for (index, item) in wanted.enumerated() {
            if let answer = answers[index] {
                out.append(answer)
                continue
            }
            for entry in held where entry.item == index {
                guard stored.contains(entry.asset.fileChecksum) else {
                    out.append(StratusError(.notFound, "the asset in field '\(item.field)' of '\(Names.printable(item.name))' is no longer stored").dictionary(uuid: uuid, recordName: item.name))
                    continue
                }
                let receipt: JSON = ["c": .int(containerID.rawValue), "e": .string(request.caller.environment.rawValue), "d": .string(request.scope.rawValue),
                                     "o": .string(user.rawValue), "k": .string(entry.asset.fileChecksum), "s": .int(entry.asset.size), "x": .int(expires)]
                // The asset dictionary alone (CKWS): saved as a field's value as it comes.
                out.append(["fileChecksum": .string(entry.asset.fileChecksum), "size": .int(entry.asset.size),
                            "receipt": .string(sealer.seal(receipt, purpose: Self.receiptPurpose))])
            }
        }
        return ["assets": .array(out)]
    }
}
