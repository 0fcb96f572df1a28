import Foundation
import HTTPTypes
import Hummingbird
import StratusCore

extension Response {
    /// A JSON response.
    static func json(_ value: JSON, status: HTTPResponse.Status = .ok, headers extra: HTTPFields = [:]) -> Response {
        // Room for the request id the channel adds, so that header does not grow the list again.
        var headers = HTTPFields()
        headers.reserveCapacity(2 + extra.count)
        headers.append(HTTPField(name: .contentType, value: "application/json; charset=utf-8"))
        headers.append(contentsOf: extra)
        let size = JSONWriter.byteCount(value)
        var buffer = ByteBufferAllocator().buffer(capacity: size)
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: size) { memory in
            JSONWriter.write(value, exactly: size, into: UnsafeMutableRawBufferPointer(rebasing: memory[0..<size]))
            return size
        }
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: buffer))
    }
}

extension StratusError {
    /// The CKWS error dictionary. `uuid` identifies the failure in the server log. `zoneID` is the
    /// zone the request named, echoed as a zone ID dictionary (its string `zoneName` and
    /// `ownerRecordName`) and left out when the client sent something else there. A server record
    /// is rendered as the request renders records (`rendering`). `details`: members a management
    /// answer adds (a refused deploy's plan, as `serverRecord`).
    func dictionary(uuid: String, recordName: String? = nil, zoneID: JSON? = nil, rendering: RecordRendering = RecordRendering(),
                    details: [String: JSON] = [:]) -> JSON {
        var members: [String: JSON] = [
            "uuid": .string(uuid),
            "serverErrorCode": .string(code.name),
            "reason": .string(reason),
        ]
        if let retryAfter { members["retryAfter"] = .int(Int64(retryAfter)) }
        if let redirectURL { members["redirectURL"] = .string(redirectURL) }
        if let serverRecord { members["serverRecord"] = serverRecord.wireJSON(rendering) }
        for (key, value) in details { members[key] = value }
        if let recordName { members["recordName"] = .string(recordName) }
        if let zoneID = zoneID.flatMap(Self.echoedZoneID) { members["zoneID"] = zoneID }
        return .object(members)
    }

    /// The zone ID dictionary of a client's `zoneID`, or `nil` when it holds none.
    static func echoedZoneID(_ json: JSON) -> JSON? {
        guard let given = json.objectValue else { return nil }
        var kept: [String: JSON] = [:]
        for key in ["zoneName", "ownerRecordName"] {
            if let text = given[key]?.stringValue { kept[key] = .string(text) }
        }
        return kept.isEmpty ? nil : .object(kept)
    }

    /// The whole-request error response (its code noted for `/metrics`).
    func response(uuid: String) -> Response {
        RequestID.state?.errorCode = code.name
        RequestID.state?.reason = reason
        var headers: HTTPFields = [:]
        if let retryAfter { headers[.retryAfter] = String(retryAfter) }
        return .json(dictionary(uuid: uuid), status: HTTPResponse.Status(code: code.httpStatus), headers: headers)
    }

    /// A request body that is too large: HTTP 413 with `BAD_REQUEST`.
    static func bodyTooLarge(limit: Int) -> StratusError {
        var error = StratusError(.badRequest, "the request body is larger than \(limit) bytes; split it into smaller requests")
        error.code = StratusError.Code("BAD_REQUEST", httpStatus: 413)
        return error
    }
}

/// The id of an error dictionary: the current request's (`RequestID`), else a new one.
func newUUID() -> String { RequestID.current ?? RandomUUID.string() }
