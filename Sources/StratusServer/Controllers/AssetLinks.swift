import Foundation
import StratusCore
import StratusStore

/// What records carry about their assets: the signed download URLs of records read, and the
/// check of the receipts of assets saved.
struct AssetLinks: Sendable {
    let sealer: TokenSealer
    /// Where asset download URLs start (the public URL and the download path).
    let downloadURLBase: String
    let downloadURLLifetime: Duration

    static func millisecondsFromNow(_ duration: Duration) -> Int64 {
        now() + duration.components.seconds * 1000
    }

    /// Checks the receipts of assets saved in the caller's `scope`: each must be one this server
    /// sealed for this container, environment, database and user, for this record type and field
    /// (a receipt from `assets/rereference` fits any), not expired, for this checksum and size.
    func receiptCheck(_ caller: Caller, scope: DatabaseScope) -> ModifyRequest.ReceiptCheck {
        let (sealer, containerID, environment, user, now) = (sealer, caller.container.id, caller.environment.rawValue, caller.user?.rawValue ?? "", now())
        return { asset, recordType, field in
            guard let receipt = asset.receipt, let payload = sealer.open(receipt, purpose: AssetsController.receiptPurpose)?.objectValue else {
                return .badRequest("field '\(field)': the asset's receipt is not one Stratus made; save the 'singleFile' the upload returned")
            }
            guard payload["c"] == .int(containerID.rawValue), payload["e"]?.stringValue == environment,
                  payload["d"]?.stringValue == scope.rawValue, payload["o"]?.stringValue == user else {
                return .badRequest("field '\(field)': the asset's receipt was made for another container, environment, database or user; upload the file again for this one")
            }
            if let type = payload["t"]?.stringValue, type != recordType {
                return .badRequest("field '\(field)': the asset's receipt is for a '\(type)' record, not a '\(recordType)'; ask assets/upload for this record type")
            }
            if let expected = payload["f"]?.stringValue, expected != field {
                return .badRequest("field '\(field)': the asset's receipt is for field '\(expected)'; save it there, or ask assets/rereference for a receipt that fits any field")
            }
            guard case .int(let expires)? = payload["x"], expires > now else {
                return .badRequest("field '\(field)': the asset's receipt expired; upload the file again (or ask assets/rereference)")
            }
            guard payload["k"]?.stringValue == asset.fileChecksum, payload["s"] == .int(asset.size) else {
                return .badRequest("field '\(field)': the asset's fileChecksum or size is not what its upload returned; save the 'singleFile' as it came")
            }
            return nil
        }
    }

    /// The `downloadURL` of assets in records read by this request: signed, expiring, naming the
    /// container and the exact content (so it serves nothing else).
    func assetURL(containerID: ContainerID) -> @Sendable (AssetValue) -> String {
        let (sealer, base, expires) = (sealer, downloadURLBase, Self.millisecondsFromNow(downloadURLLifetime))
        return { asset in
            base + sealer.seal(["c": .int(containerID.rawValue), "k": .string(asset.fileChecksum), "x": .int(expires)], purpose: AssetsController.downloadPurpose)
        }
    }
}
