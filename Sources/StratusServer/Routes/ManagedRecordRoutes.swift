import Foundation
import Hummingbird
import StratusCore
import StratusStore

extension StratusApp {
    /// The routes of `ManagedRecordsController`.
    func addManagedRecordRoutes(to router: Router<BasicRequestContext>) {
        for operation in ManagedRecordsController.Operation.allCases {
            manage(router, operation.method, operation.path) { request, _, grant in
                .json(try await self.managedRecords.run(operation, grant: grant, body: try await self.readObject(request)))
            }
        }
    }
}
